-- The plugin's options: defaults, validation with clear messages, and the server command.
local M = {}

-- The server settings setup({ settings = {...} }) accepts, with the server's types, ranges and defaults:
-- schema.lua is generated from the server's one schema (dspark_lsp/settings_schema.py), so a range
-- cannot drift here (tests/lsp/test_settings_schema.py checks the file is current).
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

-- The server's `backend` setting (dspark_lsp/remote/config.py): an OpenAI-compatible completions server
-- (vLLM, SGLang, TGI, llama-server) that decodes instead of the local engine. Not in schema.lua (it is an
-- object, not a scalar): `settings = { backend = { url = ..., ... } }`, or the URL as a string, or "local".
-- tests/clients/test_editor_backend_settings.py holds these against the server's rules.
M.BACKEND_FIELDS = {
  url = "string", -- http(s)://host:port, with or without /v1 (required)
  model = "string", -- the served model name; unset: the first one GET /v1/models lists
  apiKeyEnv = "string", -- the NAME of an environment variable of the server's process holding the key
  timeoutMs = "number", -- one completion, connect to last token
  stream = "boolean",
  stopTokenIds = "boolean",
  extraBody = "table", -- merged into every request body
  tokenizer = "string", -- the prompt's tokenizer when it is not the `model` setting's
}
M.BACKEND_TIMEOUT_MS = { min = 100, max = 600000 }
M.BACKEND_RESERVED = { "model", "prompt", "stream", "stream_options", "max_tokens", "stop", "temperature" }

--- nil when `url` is an http(s) URL with a host (what the server accepts), else what is wrong with it.
function M.backend_url_problem(url)
  local scheme, rest = url:match("^%s*(%a[%w+.-]*)://(.-)%s*$")
  scheme = scheme and scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then
    return "must be an http:// or https:// URL with a host"
  end
  local host_port = rest:match("^[^/?#]*"):gsub("^.*@", "")
  local host, port = host_port:match("^(%b[])(.*)$")
  if not host then
    host, port = host_port:match("^([^:]*)(.*)$")
  end
  if port ~= "" then
    local digits = port:match("^:(%d*)$")
    if digits == nil or (digits ~= "" and tonumber(digits) > 65535) then
      return "is not a URL (its port is not a number in [0, 65535])"
    end
  end
  if host == "" or host == "[]" then
    return "must be an http:// or https:// URL with a host"
  end
  if rest:find("[?#][^#]") then
    return "must not have a query or fragment"
  end
  return nil
end

--- nil when `value` is a `backend` setting the server takes, else the problem in words.
local function backend_problem(value)
  if value == nil or value == vim.NIL or value == "local" then
    return nil
  end
  local function bad(field, expected, got)
    return string.format("server setting 'backend%s' %s, got %s", field, expected, vim.inspect(got))
  end
  if type(value) == "string" then
    local problem = M.backend_url_problem(value)
    return problem and bad("", problem, value) or nil
  end
  if type(value) ~= "table" then
    return bad("", "must be a table of backend fields, a URL or \"local\"", value)
  end
  for key, item in pairs(value) do
    local want = M.BACKEND_FIELDS[key]
    if want == nil then
      local known = vim.tbl_keys(M.BACKEND_FIELDS)
      table.sort(known)
      return "unknown backend field '" .. tostring(key) .. "' (known: " .. table.concat(known, ", ") .. ")"
    end
    if item ~= vim.NIL and type(item) ~= want then
      return bad("." .. key, "must be a " .. want, item)
    end
  end
  local url = value.url
  if url == nil or url == vim.NIL then
    return "server setting 'backend' needs a url (leave `backend` out for the local engine)"
  end
  local problem = M.backend_url_problem(url)
  if problem then
    return bad(".url", problem, url)
  end
  for _, key in ipairs({ "model", "tokenizer" }) do
    if type(value[key]) == "string" and vim.trim(value[key]) == "" then
      return bad("." .. key, "must be a non-empty string", value[key])
    end
  end
  local key_env = value.apiKeyEnv
  if type(key_env) == "string" and not key_env:match("^[A-Za-z_][A-Za-z0-9_]*$") then
    return bad(".apiKeyEnv", "must be the name of an environment variable (letters, digits, _), not the key itself", key_env)
  end
  local t = value.timeoutMs
  if type(t) == "number" and (t ~= t or math.floor(t) ~= t or t < M.BACKEND_TIMEOUT_MS.min or t > M.BACKEND_TIMEOUT_MS.max) then
    return bad(".timeoutMs", string.format("must be an integer in [%d, %d] (milliseconds)", M.BACKEND_TIMEOUT_MS.min,
      M.BACKEND_TIMEOUT_MS.max), t)
  end
  local extra = value.extraBody
  if type(extra) == "table" then
    if not vim.tbl_isempty(extra) and vim.tbl_islist(extra) then
      return bad(".extraBody", "must be a table of request fields, not a list", extra)
    end
    local reserved = vim.tbl_filter(function(k)
      return extra[k] ~= nil
    end, M.BACKEND_RESERVED)
    if #reserved > 0 then
      table.sort(reserved)
      return bad(".extraBody", "may not set " .. table.concat(reserved, ", ") .. " (the server sets them)", extra)
    end
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
    if key == "backend" then
      local problem = backend_problem(value)
      if problem then
        return nil, problem
      end
    elseif s == nil then
      local known = vim.tbl_keys(M.SCHEMA)
      table.insert(known, "backend")
      table.sort(known)
      return nil, "unknown server setting '" .. tostring(key) .. "' (known: " .. table.concat(known, ", ") .. ")"
    else
      local problem = server_setting_problem(s, value)
      if problem then
        return nil, problem
      end
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

--- The settings as sent to the server (initializationOptions and the `dspark` section): a copy in which
--- empty tables that mean JSON objects ({} settings, backend.extraBody = {}) encode as {} and not [].
function M.payload(settings)
  local out = vim.deepcopy(settings or {})
  if vim.tbl_isempty(out) then
    return vim.empty_dict()
  end
  if type(out.backend) == "table" and type(out.backend.extraBody) == "table" and vim.tbl_isempty(out.backend.extraBody) then
    out.backend.extraBody = vim.empty_dict()
  end
  return out
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
