"""Tables and plots shared by sim and serve."""
