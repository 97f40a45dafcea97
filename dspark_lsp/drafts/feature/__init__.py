"""The feature-conditioned draft (EAGLE-style): one transformer layer that reads the target's own last
hidden states, so it predicts what *this* target will say instead of what code usually says."""
