"""Writing the formats the readers read, for the demo's dumps and the tests' fixtures: ATB ``.bin``
files (``atb_bin``) and torch.save's zip files (``torch_file``), without torch. No reader imports them."""
