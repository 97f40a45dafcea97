"""DSpark LSP."""
