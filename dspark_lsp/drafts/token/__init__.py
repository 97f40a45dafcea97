"""The DSpark token draft: its config, network and DraftSource adapter (vocabulary and io: drafts/)."""
