"""Context from the user's project for the completion prompt: other files' chunks and definitions.

Torch-free. The pieces, each one job:

* ``types``: ``ContextFile`` (one piece of another file that goes into the prompt) and the settings.
* ``ring``: a bounded ring buffer of chunks of the documents the editor has open or the user edited.
* ``imports`` / ``outline``: the current file's imports (tree-sitter queries in ``grammars/<lang>/
  imports.scm``) resolved to files, and the outline of an imported name's definition.
* ``workspace``: reading the client's workspace folders safely (bounded, no links out, no binaries).
* ``gather``: picks from the sources within a budget, in an order that stays stable while the user types.

The prompt format that carries them is ``dspark_lsp.prompt``.
"""
