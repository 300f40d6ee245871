"""What error a tensor may show and still match its golden: the thresholds by dtype and name, the
noise floor a baseline run sets, the rounding a dtype explains, a mask's fill values, and how a
row's error is read. The metrics engine passes or fails each tensor by them; the verdicts above it
judge operators with them."""
