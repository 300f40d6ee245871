"""Pictures of a comparison for a ticket (``report --plot``); the TUI draws its own."""
