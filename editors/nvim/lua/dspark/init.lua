-- DSpark for Neovim: `require("dspark").setup{}` starts the DSpark server for the supported filetypes
-- and shows its inline completions as ghost text (Neovim's own inline completion on 0.12+).
local compat = require("dspark.compat")
local cfgmod = require("dspark.config")
local client = require("dspark.client")
local ghost = require("dspark.ghost")

local M = {}

local config = nil
local enabled = true
local timer = nil
local pending = {} -- bufnr -> request id in flight
local native = nil -- vim.lsp.inline_completion when used

local function notify(msg, level)
  vim.notify("dspark: " .. msg, level or vim.log.levels.INFO)
end

--- Tells the server what the user saw and took (dspark/stats counts them: acceptance rate). This
--- plugin draws the ghost text itself, so "shown" is exact here: a choice drawn at the cursor.
local function report(method, bufnr, text)
  local c = client.client()
  if c and text and text ~= "" then
    pcall(compat.notify, c, method, { uri = vim.uri_from_bufnr(bufnr), item = { insertText = text } })
  end
end

local function cancel_pending(bufnr)
  local id = pending[bufnr]
  pending[bufnr] = nil
  local c = client.client()
  if id and c then
    pcall(compat.cancel_request, c, id)
  end
end

--- Asks the server for a completion at the cursor of the current buffer and shows it.
--- `opts.on_done(shown: boolean, items?)` is called when the answer was handled (tests and scripts use it).
function M.trigger(opts)
  opts = opts or {}
  local done = opts.on_done or function() end
  local bufnr = vim.api.nvim_get_current_buf()
  local c = client.client()
  if not enabled or not c or not vim.lsp.buf_is_attached(bufnr, c.id) then
    done(false)
    return false
  end
  cancel_pending(bufnr)
  local cursor = vim.api.nvim_win_get_cursor(0)
  local row, col = cursor[1] - 1, cursor[2]
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
  local encoding = c.offset_encoding or "utf-16"
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = row, character = compat.char_index(line, col, encoding) },
    context = { triggerKind = opts.automatic and 2 or 1 },
  }
  local my_id = nil
  local ok, id = compat.request(c, "textDocument/inlineCompletion", params, function(err, result)
    if my_id == nil or pending[bufnr] ~= my_id then
      -- cancelled or superseded: the answer is for an older cursor; drop it
      done(false)
      return
    end
    pending[bufnr] = nil
    local now = vim.api.nvim_win_get_cursor(0)
    if err or not result or vim.api.nvim_get_current_buf() ~= bufnr
      or vim.api.nvim_buf_get_changedtick(bufnr) ~= tick or now[1] - 1 ~= row or now[2] ~= col then
      done(false)
      return
    end
    local items = result.items or result
    local shown = ghost.show(bufnr, row, col, ghost.choices(bufnr, row, col, items, encoding))
    if shown then
      report("textDocument/didShowCompletion", bufnr, ghost.text(bufnr))
    end
    done(shown, items)
  end, bufnr)
  if ok and id then
    my_id = id
    pending[bufnr] = id
  else
    done(false)
  end
  return ok
end

local function schedule_trigger()
  if timer then
    timer:stop()
  else
    timer = compat.uv.new_timer()
  end
  timer:start(config.debounce_ms, 0, vim.schedule_wrap(function()
    if vim.api.nvim_get_mode().mode:sub(1, 1) == "i" then
      M.trigger({ automatic = true })
    end
  end))
end

function M.is_visible()
  return ghost.current(vim.api.nvim_get_current_buf()) ~= nil
end

--- The text of the suggestion shown in the current buffer, or nil.
function M.suggestion()
  return ghost.text(vim.api.nvim_get_current_buf())
end

function M.accept()
  if native then
    return native.get() and true or false
  end
  local bufnr = vim.api.nvim_get_current_buf()
  local text = ghost.text(bufnr)
  local accepted = ghost.accept(bufnr)
  if accepted then
    report("dspark/didAcceptCompletion", bufnr, text)
  end
  return accepted
end

function M.next()
  if native then
    native.select({ count = 1 })
    return true
  end
  local bufnr = vim.api.nvim_get_current_buf()
  local cycled = ghost.cycle(bufnr, 1)
  if cycled then
    report("textDocument/didShowCompletion", bufnr, ghost.text(bufnr))
  end
  return cycled
end

function M.prev()
  if native then
    native.select({ count = -1 })
    return true
  end
  local bufnr = vim.api.nvim_get_current_buf()
  local cycled = ghost.cycle(bufnr, -1)
  if cycled then
    report("textDocument/didShowCompletion", bufnr, ghost.text(bufnr))
  end
  return cycled
end

function M.dismiss()
  local bufnr = vim.api.nvim_get_current_buf()
  cancel_pending(bufnr)
  ghost.clear(bufnr)
end

--- The last `dspark/status` the server sent ({state, message, lastLatencyMs?, speedup?, ...}).
function M.status()
  return client.status
end

--- A short text for statuslines, e.g. "DSpark 85ms 2.3x".
function M.statusline()
  local s = client.status
  if not enabled then
    return "DSpark off"
  end
  if s.state ~= "ready" then
    return "DSpark " .. s.state
  end
  local parts = { "DSpark" }
  if type(s.lastLatencyMs) == "number" then
    table.insert(parts, string.format("%dms", math.floor(s.lastLatencyMs + 0.5)))
  end
  if type(s.speedup) == "number" then
    table.insert(parts, string.format("%.1fx", s.speedup))
  end
  return table.concat(parts, " ")
end

--- Requests `dspark/stats`; calls `callback(err, result)`, or shows the figures when none is given.
function M.stats(callback)
  local c = client.client()
  callback = callback or function(err, result)
    if err then
      notify("dspark/stats failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
    else
      notify(vim.inspect(result))
    end
  end
  if not c then
    callback({ message = "the server is not running (" .. client.status.state .. ")" }, nil)
    return
  end
  compat.request(c, "dspark/stats", vim.empty_dict(), function(err, result)
    callback(err, result)
  end, 0)
end

function M.toggle()
  enabled = not enabled
  if not enabled then
    for bufnr in pairs(pending) do
      cancel_pending(bufnr)
    end
    ghost.clear(vim.api.nvim_get_current_buf())
  end
  config.settings.enable = enabled
  client.update_settings(config.settings)
  if native then
    pcall(native.enable, enabled)
  end
  notify(enabled and "completions on" or "completions off")
  return enabled
end

local function attach(bufnr)
  if vim.bo[bufnr].buftype ~= "" then
    return
  end
  local id = client.attach(bufnr, config)
  if not id then
    return
  end
  if native then
    local ok = pcall(native.enable, true, { bufnr = bufnr })
    if not ok then
      native = nil -- an API other than the one we know: draw the ghost text ourselves
    end
  end
  local map = function(name, fn, fallback)
    local lhs = config.keymaps[name]
    if not lhs then
      return
    end
    vim.keymap.set("i", lhs, function()
      if not fn() and fallback then
        -- nothing to act on: the key does what it did before (Tab indents...)
        vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(lhs, true, false, true), "n", false)
      end
    end, { buffer = bufnr, silent = true, desc = "dspark: " .. name })
  end
  map("accept", M.accept, true)
  map("next", M.next, false)
  map("prev", M.prev, false)
  map("dismiss", function()
    local shown = M.is_visible()
    M.dismiss()
    return shown
  end, true)
  map("trigger", function()
    M.trigger()
    return true
  end, false)
end

local function define_commands()
  local cmd = vim.api.nvim_create_user_command
  cmd("DSparkStatus", function()
    local s = client.status
    notify(M.statusline() .. (s.message and s.message ~= "" and (" — " .. s.message) or ""))
  end, { desc = "Show the DSpark server's state" })
  cmd("DSparkStats", function()
    M.stats()
  end, { desc = "Show recent DSpark completion figures" })
  cmd("DSparkToggle", function()
    M.toggle()
  end, { desc = "Turn DSpark completions on or off" })
  cmd("DSparkRestart", function()
    M.restart()
  end, { desc = "Restart the DSpark server" })
  cmd("DSparkLog", function()
    vim.cmd("edit " .. vim.fn.fnameescape(vim.lsp.get_log_path()))
  end, { desc = "Open the LSP log (server stderr lands there)" })
end

--- Stops the server and starts it again for the buffers of supported filetypes.
function M.restart()
  client.stop()
  client.last_error = nil
  vim.defer_fn(function()
    for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
      if vim.api.nvim_buf_is_loaded(bufnr) and vim.tbl_contains(config.filetypes, vim.bo[bufnr].filetype) then
        attach(bufnr)
      end
    end
  end, 200)
end

--- Configures the plugin. Returns true, or false (with a message) when the options are invalid.
function M.setup(opts)
  local cfg, err = cfgmod.resolve(opts)
  if not cfg then
    notify("setup: " .. err, vim.log.levels.ERROR)
    return false
  end
  config = cfg
  enabled = cfg.settings.enable ~= false
  native = nil
  if cfg.native == true or cfg.native == "auto" then
    native = compat.native_inline_completion()
    if cfg.native == true and not native then
      notify("native inline completion needs Neovim 0.12+; using DSpark's own ghost text", vim.log.levels.WARN)
    end
  end

  vim.api.nvim_set_hl(0, ghost.hl, { link = "Comment", default = true })
  define_commands()

  local group = vim.api.nvim_create_augroup("dspark", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = cfg.filetypes,
    callback = function(args)
      attach(args.buf)
    end,
  })
  if not native then
    if cfg.auto_trigger then
      vim.api.nvim_create_autocmd({ "TextChangedI", "TextChangedP" }, {
        group = group,
        callback = function(args)
          if enabled and client.client() and vim.lsp.buf_is_attached(args.buf, client.id) then
            ghost.clear(args.buf)
            schedule_trigger()
          end
        end,
      })
    end
    vim.api.nvim_create_autocmd("CursorMovedI", {
      group = group,
      callback = function(args)
        local state = ghost.current(args.buf)
        local cur = vim.api.nvim_win_get_cursor(0)
        if state and (state.row ~= cur[1] - 1 or state.col ~= cur[2]) then
          ghost.clear(args.buf)
        end
      end,
    })
    vim.api.nvim_create_autocmd({ "InsertLeave", "BufLeave" }, {
      group = group,
      callback = function(args)
        cancel_pending(args.buf)
        ghost.clear(args.buf)
      end,
    })
  end
  -- Where the cursor rests (CursorHold: 'updatetime' without a key): the server prefills the prompt
  -- there in the background, so the first completion at that spot starts from cached work.
  vim.api.nvim_create_autocmd({ "CursorHold", "CursorHoldI" }, {
    group = group,
    callback = function(args)
      local c = client.client()
      if enabled and c and vim.lsp.buf_is_attached(args.buf, client.id) then
        local ok, params = pcall(vim.lsp.util.make_position_params, 0, c.offset_encoding or "utf-16")
        if ok then
          pcall(compat.notify, c, "dspark/cursor", params)
        end
      end
    end,
  })
  -- Buffers opened before setup() ran (a plugin manager loading lazily) get attached too.
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.tbl_contains(cfg.filetypes, vim.bo[bufnr].filetype) then
      attach(bufnr)
    end
  end
  return true
end

--- The resolved configuration (nil before setup).
function M.config()
  return config
end

return M
