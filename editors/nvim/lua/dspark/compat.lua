-- Version shims: one place that knows how Neovim's API changed between 0.7 and today,
-- so the rest of the plugin calls one spelling.
local M = {}

---@param version string like "0.10"
function M.has(version)
  return vim.fn.has("nvim-" .. version) == 1
end

M.uv = vim.uv or vim.loop

-- 0.10 added virtual text placed inside the line; before it the ghost text overlays or follows the line.
M.inline_virt_text = M.has("0.10")

-- 0.11 turned client functions into methods (client:request) and deprecated the dot spelling.
local methods = M.has("0.11")

function M.request(client, method, params, handler, bufnr)
  if methods then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

function M.notify(client, method, params)
  if methods then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

function M.cancel_request(client, id)
  if methods then
    return client:cancel_request(id)
  end
  return client.cancel_request(id)
end

function M.is_stopped(client)
  if methods then
    return client:is_stopped()
  end
  return client.is_stopped()
end

function M.stop(client, force)
  if methods then
    return client:stop(force)
  end
  return client.stop(force)
end

--- Character index of byte column `col` of `line` in the client's position encoding.
function M.char_index(line, col, encoding)
  col = math.min(col, #line)
  if encoding == "utf-8" then
    return col
  end
  if M.has("0.11") then
    return vim.str_utfindex(line, encoding or "utf-16", col, false)
  end
  local utf32, utf16 = vim.str_utfindex(line, col)
  return encoding == "utf-32" and utf32 or utf16
end

--- Byte column of character index `index` (in the client's encoding) of `line`; clamped to the line.
function M.byte_index(line, index, encoding)
  if encoding == "utf-8" then
    return math.min(index, #line)
  end
  local ok, col
  if M.has("0.11") then
    ok, col = pcall(vim.str_byteindex, line, encoding or "utf-16", index, false)
  else
    ok, col = pcall(vim.str_byteindex, line, index, encoding ~= "utf-32")
  end
  if not ok or col == nil then
    return #line
  end
  return math.min(col, #line)
end

function M.get_client(id)
  return id and vim.lsp.get_client_by_id(id) or nil
end

--- Native inline completion (Neovim 0.12+), or nil.
function M.native_inline_completion()
  local ok, mod = pcall(function()
    return vim.lsp.inline_completion
  end)
  if ok and type(mod) == "table" and type(mod.enable) == "function" then
    return mod
  end
  return nil
end

return M
