-- The one DSpark server process shared by all buffers: start (vim.lsp.start on 0.11+,
-- vim.lsp.start_client before), attach buffers, and keep the last `dspark/status`.
local compat = require("dspark.compat")
local cfgmod = require("dspark.config")

local M = {}

M.id = nil
M.status = { state = "stopped", message = "" }
M.last_error = nil

local function notify(msg, level)
  vim.notify("dspark: " .. msg, level or vim.log.levels.INFO)
end

local function set_status(status)
  M.status = status
  -- Lets statuslines refresh: `autocmd User DSparkStatus redrawstatus`.
  vim.api.nvim_exec_autocmds("User", { pattern = "DSparkStatus", modeline = false })
end

local function on_status(_, result)
  if type(result) == "table" and type(result.state) == "string" then
    set_status(result)
  end
  return vim.NIL
end

-- window/showMessage from the server (settings it refused, a load that failed, a backend it cannot
-- use) through vim.notify like the plugin's own messages: Neovim's default handler prints warnings
-- with nvim_out_write only, where they scroll away and notification plugins never see them.
local MESSAGE_LEVELS = {
  [1] = vim.log.levels.ERROR,
  [2] = vim.log.levels.WARN,
  [3] = vim.log.levels.INFO,
  [4] = vim.log.levels.DEBUG,
}

local function on_show_message(_, result)
  if type(result) == "table" and type(result.message) == "string" then
    -- "DSpark settings: ..." / "DSpark: could not load ..." -> "dspark: settings: ..." / "dspark: could not ..."
    local text = result.message:gsub("^DSpark:?%s*", "")
    notify(text, MESSAGE_LEVELS[result.type] or vim.log.levels.INFO)
  end
  return vim.NIL
end

local function root_dir(cfg)
  return cfg.root_dir or compat.uv.cwd()
end

local function capabilities()
  local caps = vim.lsp.protocol.make_client_capabilities()
  -- Neovim before 0.12 does not announce inline completion; say we take it (we draw it ourselves).
  caps.textDocument = caps.textDocument or {}
  caps.textDocument.inlineCompletion = caps.textDocument.inlineCompletion or { dynamicRegistration = false }
  return caps
end

function M.client()
  local client = compat.get_client(M.id)
  if client and not compat.is_stopped(client) then
    return client
  end
  return nil
end

--- Starts the server if needed and attaches `bufnr`; returns the client id or nil (with a message shown).
function M.attach(bufnr, cfg)
  local client = M.client()
  if client then
    if not vim.lsp.buf_is_attached(bufnr, client.id) then
      vim.lsp.buf_attach_client(bufnr, client.id)
    end
    return client.id
  end
  local cmd, err = cfgmod.server_cmd(cfg)
  if not cmd then
    if M.last_error ~= err then
      M.last_error = err
      notify(err, vim.log.levels.ERROR)
    end
    set_status({ state = "error", message = err })
    return nil
  end
  local settings = cfgmod.payload(cfg.settings) -- JSON {} rather than [] for empty tables
  local lsp_config = {
    name = "dspark",
    cmd = cmd,
    root_dir = root_dir(cfg),
    init_options = settings,
    -- Read back by Neovim's workspace/configuration handler (section "dspark").
    settings = { dspark = settings },
    capabilities = capabilities(),
    handlers = { ["dspark/status"] = on_status, ["window/showMessage"] = on_show_message },
    flags = { debounce_text_changes = 20 },
    on_exit = function(code, signal)
      vim.schedule(function()
        if code ~= 0 then
          local msg = string.format("the server exited with code %d%s. Check :DSparkLog. %s", code,
            signal ~= 0 and (" (signal " .. signal .. ")") or "", cfgmod.INSTALL_HINT)
          set_status({ state = "error", message = msg })
          notify(msg, vim.log.levels.ERROR)
        else
          set_status({ state = "stopped", message = "" })
        end
      end)
    end,
  }
  set_status({ state = "starting", message = table.concat(cmd, " ") })
  local id
  if compat.has("0.11") then
    id = vim.lsp.start(lsp_config, {
      bufnr = bufnr,
      reuse_client = function(c)
        return c.name == "dspark"
      end,
    })
  else
    id = vim.lsp.start_client(lsp_config)
    if id then
      vim.lsp.buf_attach_client(bufnr, id)
    end
  end
  if not id then
    local msg = "could not start " .. table.concat(cmd, " ") .. ". " .. cfgmod.INSTALL_HINT
    set_status({ state = "error", message = msg })
    notify(msg, vim.log.levels.ERROR)
    return nil
  end
  M.id = id
  return id
end

--- Sends changed settings to the running server (workspace/didChangeConfiguration under `dspark`).
function M.update_settings(settings)
  local client = M.client()
  if client then
    settings = cfgmod.payload(settings)
    client.config.settings = { dspark = settings }
    compat.notify(client, "workspace/didChangeConfiguration", { settings = { dspark = settings } })
  end
end

function M.stop()
  local client = M.client()
  M.id = nil
  if client then
    compat.stop(client, false)
  end
end

return M
