"""The DSpark draft network: definition, reduced vocabulary, loading, and its DraftSource adapter."""
