"""The language server — the only package that imports pygls / lsprotocol.

server.py      the pygls server object, the stdio transport, run_server
session.py     one editor's session: the state handlers read and change; Session.close ends it
router.py      the table: which LSP method goes to which handler, and how it runs (sync / async)
handlers/      functions of (session, params), one module per concern: lifecycle, documents, workspace,
               configuration, completion, feedback, stats
protocol.py    one frame's body -> one message, answering malformed messages (envelope.py: the checks)
framing.py     bytes -> frames (Content-Length headers), recovering from broken framing
tcp.py         the --tcp listener: one session per connection
documents.py   our document store (incremental sync with LSP line-break rules)
positions.py   UTF-16 / UTF-8 / UTF-32 positions <-> code-point offsets
worker.py      debounce, cancel-previous per document, $/cancelRequest -> the decode's cancel flag
loader.py      background model load / reload / disable, dspark/status
executor.py    the one daemon worker thread every service call runs on
channel.py     thread-safe messages to the client (notifications, logs, progress)
backend.py     the injectable bundle the server needs from dspark_lsp.service
settings.py    LSP-only settings (enable, debounceMs) and settings merging
settings_schema.py  writes and checks the editors' copies of the settings table (dspark_lsp/settings_schema.py)
transport_args.py  --stdio / --tcp parsing shared by both entry points (repeats judged, not ignored)
"""
