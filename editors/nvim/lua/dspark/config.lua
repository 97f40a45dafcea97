-- The plugin's options: defaults, validation with clear messages, and the server command.
local M = {}

-- The server settings setup({ settings = {...} }) accepts, with the server's types, ranges and defaults:
-- schema.lua is generated from the server's one schema (dspark_lsp/lsp/settings_schema.py), so a range
-- cannot drift here (tests/test_settings_schema.py checks the file is current).
M.SCHEMA = {}
M.SERVER_SETTINGS = {} -- name -> the Lua type of its value
M.SERVER_DEFAULTS = {} -- name -> the server's default (what an unset setting means)
for _, s in ipairs(require("dspark.schema")) do
  M.SCHEMA[s.name] = s
  M.SERVER_SETTINGS[s.name] = (s.type == "integer") and "number" or s.type
  M.SERVER_DEFAULTS[s.name] = s.default
end

--- nil when `value` is valid for the schema entry `s`, else the problem in words.
local function server_setting_problem(s, value)
  if value == vim.NIL then
    return (not s.nullable) and string.format("server setting '%s' must be %s, got null", s.name, s.expected) or nil
  end
  local want = M.SERVER_SETTINGS[s.name]
  if type(value) ~= want then
    return string.format("server setting '%s' must be a %s, got %s", s.name, want, type(value))
  end
  local bad = false
  if want == "number" then
    bad = value ~= value
      or (s.type == "integer" and math.floor(value) ~= value)
      or (s.minimum ~= nil and (s.exclusive_minimum and value <= s.minimum or value < s.minimum))
      or (s.maximum ~= nil and value > s.maximum)
  elseif want == "string" then
    bad = (s.non_empty and value == "") or (s.enum ~= nil and not vim.tbl_contains(s.enum, value))
  end
  if bad then
    return string.format("server setting '%s' must be %s, got %s", s.name, s.expected, vim.inspect(value))
  end
  return nil
end

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
    local s = M.SCHEMA[key]
    if s == nil then
      local known = vim.tbl_keys(M.SCHEMA)
      table.sort(known)
      return nil, "unknown server setting '" .. tostring(key) .. "' (known: " .. table.concat(known, ", ") .. ")"
    end
    local problem = server_setting_problem(s, value)
    if problem then
      return nil, problem
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
