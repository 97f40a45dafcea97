-- The plugin's options: defaults, validation with clear messages, and the server command.
local M = {}

M.SERVER_SETTINGS = {
  enable = "boolean",
  model = "string",
  draftModel = "string",
  device = "string",
  dtype = "string",
  threshold = "number",
  kMin = "number",
  kMax = "number",
  alternates = "number",
  maxNewTokens = "number",
  contextWindow = "number",
  prefixShare = "number",
  relaxed = "boolean",
  debounceMs = "number",
  multiline = "string",
}

M.defaults = {
  -- Server command; nil: `python -m dspark_lsp.cli --stdio` when `python` is set, else `dspark-lsp --stdio`
  -- from PATH, else `python3 -m dspark_lsp.cli --stdio`.
  cmd = nil,
  python = nil,
  filetypes = { "python", "javascript", "javascriptreact", "typescript", "typescriptreact", "go", "rust", "java", "c", "cpp" },
  -- Server settings (docs/ARCHITECTURE.md): sent as initializationOptions and as the `dspark` section.
  settings = {},
  -- Ask for a completion after each change in insert mode (after `debounce_ms`); false: only on `trigger`.
  auto_trigger = true,
  debounce_ms = 50,
  -- "auto": Neovim's own vim.lsp.inline_completion when this Neovim has it (0.12+); false: always ours.
  native = "auto",
  -- Insert-mode keys (false disables one). `accept` falls back to the key itself when nothing is shown.
  keymaps = {
    accept = "<Tab>",
    next = "<M-]>",
    prev = "<M-[>",
    dismiss = "<C-]>",
    trigger = "<M-\\>",
  },
  root_dir = nil,
}

local TYPES = {
  cmd = "table",
  python = "string",
  filetypes = "table",
  settings = "table",
  auto_trigger = "boolean",
  debounce_ms = "number",
  keymaps = "table",
  root_dir = "string",
}

--- Merges user options over the defaults; returns (config) or (nil, message) for a user mistake.
function M.resolve(opts)
  opts = opts or {}
  if type(opts) ~= "table" then
    return nil, "setup() takes a table, got " .. type(opts)
  end
  for key, value in pairs(opts) do
    if M.defaults[key] == nil and TYPES[key] == nil and key ~= "native" then
      return nil, "unknown option '" .. tostring(key) .. "'"
    end
    local want = TYPES[key]
    if want and type(value) ~= want then
      return nil, string.format("option '%s' must be a %s, got %s", key, want, type(value))
    end
  end
  if opts.native ~= nil and opts.native ~= "auto" and type(opts.native) ~= "boolean" then
    return nil, "option 'native' must be \"auto\", true or false"
  end
  for key, value in pairs(opts.settings or {}) do
    local want = M.SERVER_SETTINGS[key]
    if want == nil then
      return nil, "unknown server setting '" .. tostring(key) .. "' (known: " .. table.concat(vim.tbl_keys(M.SERVER_SETTINGS), ", ") .. ")"
    end
    if type(value) ~= want and not (key == "draftModel" and value == vim.NIL) then
      return nil, string.format("server setting '%s' must be a %s, got %s", key, want, type(value))
    end
  end
  if opts.cmd ~= nil and (#opts.cmd == 0 or type(opts.cmd[1]) ~= "string") then
    return nil, "option 'cmd' must be a list like { \"dspark-lsp\", \"--stdio\" }"
  end
  local cfg = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts)
  -- A list option replaces the default list instead of merging index by index.
  cfg.filetypes = opts.filetypes or M.defaults.filetypes
  cfg.cmd = opts.cmd
  return cfg
end

M.INSTALL_HINT = "Install the server with `pip install dspark-lsp` (or `pip install -e .` in a checkout), "
  .. "then pass `python = \"/path/to/that/python\"` or `cmd = { \"/path/to/dspark-lsp\", \"--stdio\" }` to setup()."

--- The command to start; (cmd) or (nil, message) when the executable is missing.
function M.server_cmd(cfg)
  local cmd
  if cfg.cmd then
    cmd = cfg.cmd
  elseif cfg.python then
    cmd = { cfg.python, "-m", "dspark_lsp.cli", "--stdio" }
  elseif vim.fn.executable("dspark-lsp") == 1 then
    cmd = { "dspark-lsp", "--stdio" }
  else
    cmd = { "python3", "-m", "dspark_lsp.cli", "--stdio" }
  end
  if vim.fn.executable(cmd[1]) ~= 1 then
    return nil, "DSpark server not found: '" .. cmd[1] .. "' is not executable. " .. M.INSTALL_HINT
  end
  return cmd
end

return M
