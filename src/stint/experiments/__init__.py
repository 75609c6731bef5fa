"""Paper reproductions: one command per figure."""
