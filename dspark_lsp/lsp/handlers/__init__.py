"""LSP method handlers, one module per concern: module-level functions of (session, params).

Which method goes to which handler, and how it runs, is the table in `dspark_lsp.lsp.router`.
"""
