-- The suggestion shown as virtual text (extmarks) at the cursor: turning LSP items into ghost text,
-- drawing it, cycling through items, and inserting the chosen one.
local compat = require("dspark.compat")

local M = {}

M.ns = vim.api.nvim_create_namespace("dspark_ghost")
M.hl = "DSparkSuggestion"

-- bufnr -> { row, col, tick, choices = { {text, end_col} }, index }
local states = {}

--- Snippet syntax reduced to its plain text: ${1:name} -> name, $0/$1 -> "".
local function snippet_text(s)
  s = s:gsub("%${%d+:([^}]*)}", "%1"):gsub("%$%d+", "")
  return s
end

local function item_text(item)
  local t = item.insertText
  if type(t) == "table" then
    return snippet_text(t.value or "")
  end
  return type(t) == "string" and t or nil
end

--- Ghost text choices for the cursor at (row, col) [0-based, byte column] from a list of LSP items.
--- An item whose range starts before the cursor must repeat what was typed since; that part is not
--- shown again. Items that do not continue the typed text are dropped, as are empty ones.
function M.choices(bufnr, row, col, items, encoding)
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
  local out = {}
  for _, item in ipairs(items or {}) do
    local text = item_text(item)
    local end_col = col
    if text and item.range then
      local s, e = item.range.start, item.range["end"]
      if s.line == row and e.line == row then
        local start_col = compat.byte_index(line, s.character, encoding)
        end_col = math.max(col, compat.byte_index(line, e.character, encoding))
        if start_col < col then
          local typed = line:sub(start_col + 1, col)
          text = (text:sub(1, #typed) == typed) and text:sub(#typed + 1) or nil
        end
      else
        text = nil -- multi-line replacements are not shown as ghost text
      end
    end
    if text and text ~= "" then
      table.insert(out, { text = text, end_col = end_col })
    end
  end
  return out
end

local function draw(bufnr, state)
  vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  local choice = state.choices[state.index]
  local lines = vim.split(choice.text, "\n", { plain = true })
  local line = vim.api.nvim_buf_get_lines(bufnr, state.row, state.row + 1, false)[1] or ""
  local opts = { virt_text = { { lines[1], M.hl } }, hl_mode = "combine" }
  if compat.inline_virt_text then
    opts.virt_text_pos = "inline"
  elseif state.col >= #line then
    opts.virt_text_pos = "overlay" -- at the end of the line overlay hides nothing
  else
    opts.virt_text_pos = "eol" -- before 0.10 text cannot be pushed aside: show it after the line
  end
  if #lines > 1 then
    local virt_lines = {}
    for i = 2, #lines do
      table.insert(virt_lines, { { lines[i], M.hl } })
    end
    opts.virt_lines = virt_lines
  end
  state.extmark = vim.api.nvim_buf_set_extmark(bufnr, M.ns, state.row, state.col, opts)
end

--- Shows `choices` at (row, col); returns false when there is nothing to show.
function M.show(bufnr, row, col, choices)
  M.clear(bufnr)
  if not choices or #choices == 0 then
    return false
  end
  local state = { row = row, col = col, tick = vim.api.nvim_buf_get_changedtick(bufnr), choices = choices, index = 1 }
  states[bufnr] = state
  draw(bufnr, state)
  return true
end

function M.clear(bufnr)
  states[bufnr] = nil
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

--- The shown suggestion, or nil. A suggestion is stale once the buffer changed under it.
function M.current(bufnr)
  local state = states[bufnr]
  if state and vim.api.nvim_buf_is_valid(bufnr) and vim.api.nvim_buf_get_changedtick(bufnr) == state.tick then
    return state
  end
  return nil
end

function M.text(bufnr)
  local state = M.current(bufnr)
  return state and state.choices[state.index].text or nil
end

--- Shows the next (delta 1) or previous (delta -1) choice, wrapping around.
function M.cycle(bufnr, delta)
  local state = M.current(bufnr)
  if not state or #state.choices < 2 then
    return false
  end
  state.index = (state.index - 1 + delta) % #state.choices + 1
  draw(bufnr, state)
  return true
end

--- Inserts the shown choice and puts the cursor after it; false when nothing is shown.
function M.accept(bufnr)
  local state = M.current(bufnr)
  if not state then
    return false
  end
  local choice = state.choices[state.index]
  local lines = vim.split(choice.text, "\n", { plain = true })
  M.clear(bufnr)
  vim.api.nvim_buf_set_text(bufnr, state.row, state.col, state.row, choice.end_col, lines)
  local last_row = state.row + #lines - 1
  local last_col = (#lines == 1) and (state.col + #lines[1]) or #lines[#lines]
  if vim.api.nvim_get_current_buf() == bufnr then
    vim.api.nvim_win_set_cursor(0, { last_row + 1, last_col })
  end
  return true
end

return M
