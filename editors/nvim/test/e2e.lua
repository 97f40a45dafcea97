-- Headless end-to-end check of the plugin, driven by tests/clients/test_nvim_e2e.py and editors/ci.sh.
-- Loads the plugin the way the README says (runtimepath + setup), opens a file, asks for a completion
-- in insert mode, and writes what the editor shows (extmark virtual text) and does to a JSON file.
--
-- Environment:
--   DSPARK_E2E_OUT       result file (JSON)                 DSPARK_E2E_CMD   JSON list: the server command
--   DSPARK_E2E_FILE      file to open                       DSPARK_E2E_LINE  1-based line; the cursor goes to its end
--   DSPARK_E2E_SETTINGS  JSON object: server settings       DSPARK_E2E_TIMEOUT_MS (default 20000)
--   DSPARK_E2E_MODE      "manual" (trigger, next, accept, dismiss, stats, toggle) or "auto" (type, see it appear)
local out_path = assert(os.getenv("DSPARK_E2E_OUT"), "DSPARK_E2E_OUT is required")
local timeout = tonumber(os.getenv("DSPARK_E2E_TIMEOUT_MS") or "20000")
local mode = os.getenv("DSPARK_E2E_MODE") or "manual"
local result = { notifications = {}, mode = mode }
local uv = vim.uv or vim.loop

local function finish(ok, err)
  result.ok = ok
  result.error = err
  local f = assert(io.open(out_path, "w"))
  f:write(vim.fn.json_encode(result))
  f:close()
  vim.cmd("qall!")
end

-- Keep what the plugin tells the user, to assert on clear error messages.
vim.notify = function(msg, level)
  table.insert(result.notifications, { msg = tostring(msg), level = level or vim.log.levels.INFO })
end

--- What the plugin draws: its extmarks' virtual text, virtual lines joined with "\n".
local function shown()
  local ns = vim.api.nvim_create_namespace("dspark_ghost")
  local texts = {}
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })) do
    local details = mark[4] or {}
    local parts = {}
    for _, chunk in ipairs(details.virt_text or {}) do
      table.insert(parts, chunk[1])
    end
    for _, vline in ipairs(details.virt_lines or {}) do
      local l = {}
      for _, chunk in ipairs(vline) do
        table.insert(l, chunk[1])
      end
      table.insert(parts, "\n" .. table.concat(l))
    end
    table.insert(texts, { row = mark[2], col = mark[3], text = table.concat(parts), pos = details.virt_text_pos })
  end
  return texts
end

--- Calls `cond` every 20 ms from the event loop (so typed keys get processed in between) until it
--- is true or the timeout passes, then `next_step(met)`. Errors end the run with the traceback.
local function poll(cond, next_step)
  local deadline = uv.now() + timeout
  local function tick()
    local ok, met = xpcall(cond, debug.traceback)
    if not ok then
      return finish(false, met)
    end
    if met or uv.now() > deadline then
      local ok2, err = xpcall(function()
        next_step(met and true or false)
      end, debug.traceback)
      if not ok2 then
        finish(false, err)
      end
      return
    end
    vim.defer_fn(tick, 20)
  end
  tick()
end

local dspark

local function esc()
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<Esc>", true, false, true), "t", false)
end

-- Manual mode, in insert mode at the end of the line: trigger, cycle, accept, trigger again, dismiss,
-- stats, then leave insert mode and toggle completions off.
local function manual_steps()
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  result.insert_mode = vim.api.nvim_get_mode().mode
  result.cursor_before = { row, col }
  local done = false
  dspark.trigger({ on_done = function(s, items)
    done = true
    result.trigger_shown = s
    result.items = items
  end })
  poll(function()
    return done
  end, function()
    result.shown = shown()
    result.suggestion = dspark.suggestion()
    result.statusline = dspark.statusline()
    result.status_after_completion = vim.deepcopy(dspark.status())
    if dspark.next() then
      result.after_next = shown()
      dspark.prev()
    end
    result.after_prev = shown()
    result.accepted = dspark.accept()
    result.lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
    result.cursor = vim.api.nvim_win_get_cursor(0)
    result.after_accept = #shown()

    local done2 = false
    dspark.trigger({ on_done = function()
      done2 = true
    end })
    poll(function()
      return done2
    end, function()
      result.before_dismiss = #shown()
      dspark.dismiss()
      result.after_dismiss = #shown()
      local stats_done = false
      dspark.stats(function(err, res)
        result.stats = { err = err, result = res }
        stats_done = true
      end)
      poll(function()
        return stats_done
      end, function()
        result.toggled_to = dspark.toggle()
        poll(function()
          return dspark.status().state == "disabled"
        end, function()
          result.status_after_toggle = vim.deepcopy(dspark.status())
          result.trigger_when_off = dspark.trigger()
          esc()
          vim.defer_fn(function()
            finish(true)
          end, 50)
        end)
      end)
    end)
  end)
end

-- Auto mode: type one character in insert mode; the plugin asks by itself after the debounce.
local function auto_steps()
  result.insert_mode = vim.api.nvim_get_mode().mode
  vim.api.nvim_feedkeys("#", "t", false)
  poll(function()
    return #shown() > 0
  end, function(met)
    result.auto_shown = met and shown() or {}
    result.lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
    esc()
    poll(function()
      return vim.api.nvim_get_mode().mode == "n"
    end, function()
      result.after_leave = #shown()
      finish(true)
    end)
  end)
end

local function main()
  local v = vim.version()
  result.nvim = string.format("%d.%d.%d", v.major, v.minor, v.patch)
  vim.cmd("filetype on")
  dspark = require("dspark")
  local settings = vim.fn.json_decode(os.getenv("DSPARK_E2E_SETTINGS") or "{}")
  result.setup = dspark.setup({
    cmd = vim.fn.json_decode((assert(os.getenv("DSPARK_E2E_CMD"), "DSPARK_E2E_CMD is required"))),
    settings = (type(settings) == "table" and not vim.tbl_isempty(settings)) and settings or nil,
    auto_trigger = mode == "auto",
  })
  vim.cmd("edit " .. vim.fn.fnameescape((assert(os.getenv("DSPARK_E2E_FILE"), "DSPARK_E2E_FILE is required"))))
  result.filetype = vim.bo.filetype
  poll(function()
    local s = dspark.status().state
    return s == "ready" or s == "error" or s == "disabled" or s == "stopped"
  end, function()
    result.status_after_start = vim.deepcopy(dspark.status())
    if result.status_after_start.state ~= "ready" then
      return finish(true)
    end
    vim.api.nvim_win_set_cursor(0, { tonumber(os.getenv("DSPARK_E2E_LINE") or "1"), 0 })
    -- The steps run from a timer while `A` holds insert mode (feedkeys x! returns when <Esc> ends it).
    vim.defer_fn(function()
      local ok, err = xpcall(mode == "auto" and auto_steps or manual_steps, debug.traceback)
      if not ok then
        esc()
        finish(false, err)
      end
    end, 10)
    vim.api.nvim_feedkeys("A", "xt!", false)
  end)
end

local ok, err = xpcall(main, debug.traceback)
if not ok then
  finish(false, err)
end
