-- lease-lua-profile.lua LUADIR RECORD: where a lease call's Lua goes, by
-- function and by line (scripts/lease-lua-profile.sh runs it).
--
-- RECORD is a Lua chunk returning the FCALLs a benchmark made (each its
-- function's name, KEYS, ARGV, every redis.call's arguments and reply, and
-- the reply). The library's prelude and its grant, renew and release bodies
-- (from LUADIR) are loaded into this interpreter (Lua 5.1, as Redis embeds)
-- as the library builds them, and each recorded grant, renewal and release
-- after the benchmark's first SKIP (8: its held leases) is called again with
-- a count hook on every VM instruction. redis.call answers with the recorded
-- replies; struct.pack/unpack and redis.sha1hex are stand-ins outside the
-- count (sha1hex answers the tip the recorded call stored). Every command's
-- arguments and every reply are compared with the record: a change to the
-- scripts that kept both is reported as "0 differ".
--
-- The counts are Lua VM instructions (bytecodes), not machine
-- instructions: under callgrind an average op of a lease call cost ~110
-- machine instructions (its table reads and writes, strings made and
-- garbage collected included), a C function call more (string.format ~1.6k,
-- string.match ~1.9k, sha1hex ~5k, a redis.call ~4k besides its command).
local luadir, recfile = arg[1], arg[2]
local SKIP = tonumber(os.getenv('SKIP') or '8')
local BODIES = {'grant', 'renew', 'release'}
-- Helpers whose work is counted to their caller in "by caller".
local HELPERS = {str = true, num = true, state_get = true, state_set = true, argnum = true, digits = true,
  muldiv = true, divmod = true, scale = true, state_incr = true, stored = true}

local function read(p)
  local f = assert(io.open(p))
  local s = f:read('*a')
  f:close()
  return s
end
local function lines(s)
  local t = {}
  for l in (s .. '\n'):gmatch('([^\n]*)\n') do t[#t + 1] = l end
  return t
end

-- The library's code as lease/functions.go builds it, and where each of
-- its lines comes from (file, line) and in which function it is.
local parts, from, src, fname = {}, {}, {}, {}
local line = 1
local function add(text, file)
  local ls = lines(text)
  if text:sub(-1) == '\n' then ls[#ls] = nil end
  parts[#parts + 1] = text
  for i = 1, #ls do
    if file then from[line + i - 1] = {file, i} end
  end
  line = line + #ls
end
add('local KEYS, ARGV\n')
src.prelude = lines(read(luadir .. '/prelude.lua'))
add(read(luadir .. '/prelude.lua'), 'prelude')
for _, n in ipairs(BODIES) do
  add('\nredis.register_function{function_name = \'' .. n .. '\', callback = function(keys, args)\nKEYS, ARGV = keys, args\nbegin_call()\n')
  local b = read(luadir .. '/' .. n .. '.lua')
  src[n] = lines(b)
  add(b, n)
  add('\nend}\n')
end
local cur = '(body)'
for l = 1, line do
  local w = from[l]
  if w then
    local text = src[w[1]][w[2]] or ''
    local f = text:match('^local function ([%w_]+)')
    if f then cur = f elseif w[1] ~= 'prelude' then cur = w[1] .. '.lua' end
    fname[l] = cur
  else
    fname[l] = '(body)'
  end
end

-- Stand-ins for what Redis gives the library.
local fns, rec, ci, differ, note = {}, nil, 0, 0, nil
local function call(...)
  ci = ci + 1
  local c = rec.calls[ci]
  local a = {...}
  if not c or c.args[1] ~= a[1] then
    error(string.format('replay diverged at command %d: %s, recorded %s', ci, tostring(a[1]), tostring(c and c.args[1])))
  end
  for i = 1, math.max(#a, #c.args) do
    if tostring(a[i]) ~= tostring(c.args[i]) then
      differ = differ + 1
      if differ <= 3 then io.stderr:write('differs: ', table.concat(a, ' '):sub(1, 200), '\n  recorded: ', table.concat(c.args, ' '):sub(1, 200), '\n') end
      break
    end
  end
  if note then note(a[1]) end
  return c.reply
end
local function unpack_double(s, i)
  local b1, b2, b3, b4, b5, b6, b7, b8 = s:byte(i, i + 7)
  local sign = b1 >= 128 and -1 or 1
  local e = (b1 % 128) * 16 + math.floor(b2 / 16)
  local m = ((((((b2 % 16) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6) * 256 + b7) * 256 + b8
  if e == 0 then return sign * math.ldexp(m, -1074) end
  return sign * math.ldexp(m + 4503599627370496, e - 1075)
end
local function pack_double(x)
  if x == 0 then return string.rep('\0', 8) end
  local sign = 0
  if x < 0 then sign, x = 128, -x end
  local m, e = math.frexp(x)
  local ex, mant, b = e + 1022, (m * 2 - 1) * 4503599627370496, {}
  for i = 8, 3, -1 do
    b[i] = mant % 256
    mant = (mant - mant % 256) / 256
  end
  b[2] = (ex % 16) * 16 + mant
  b[1] = sign + math.floor(ex / 16)
  return string.char(unpack(b))
end
struct = {
  unpack = function(fmt, s)
    local out, i = {}, 1
    for _ in fmt:gmatch('d') do
      out[#out + 1] = unpack_double(s, i)
      i = i + 8
    end
    out[#out + 1] = i
    return unpack(out)
  end,
  pack = function(fmt, ...)
    local a, out = {...}, {}
    for k = 1, #a do out[k] = pack_double(a[k]) end
    return table.concat(out)
  end,
}
redis = {call = call, pcall = call, log = function() end, LOG_WARNING = 3,
  error_reply = function(m) return {err = m} end, status_reply = function(m) return {ok = m} end,
  register_function = function(t) fns[t.function_name] = t.callback end,
  sha1hex = function()
    for k = ci + 1, #rec.calls do
      local a = rec.calls[k].args
      if a[1] == 'HSET' and a[3] == 'seq' then return string.format('%08x', tonumber(a[6])) .. string.rep('0', 32) end
    end
    return string.rep('0', 40)
  end}
assert(loadstring(table.concat(parts), '=library'))()

-- The count hook: ops by line, and by the first caller that is no helper.
local ops, byfn, bycaller, ccalls, cmds = {}, {}, {}, {}, {}
local function caller(level)
  while true do
    local info = debug.getinfo(level, 'S')
    if not info or info.source ~= '=library' then return '(body)' end
    local f = fname[info.linedefined] or '(body)'
    if not HELPERS[f] then return f end
    level = level + 1
  end
end
local function bump(t, k, n) t[k] = (t[k] or 0) + (n or 1) end
local function hook(ev)
  if ev == 'count' then
    local info = debug.getinfo(2, 'Sl')
    if info.source == '=library' then
      bump(ops, info.currentline)
      bump(byfn, fname[info.linedefined] or '(body)')
      bump(bycaller, caller(3))
    end
    return
  end
  local callee, parent = debug.getinfo(2, 'Sn'), debug.getinfo(3, 'S')
  if parent and parent.source == '=library' and callee.source ~= '=library' then
    bump(ccalls, caller(4) .. '\t' .. tostring(callee.name))
  end
end

local recs = dofile(recfile)
local n, bad, seen, total = 0, 0, 0, 0
local perkind = {}
for _, r in ipairs(recs) do
  if fns[r.fn] then
    seen = seen + 1
    rec, ci = r, 0
    if seen <= SKIP then
      fns[r.fn](r.keys, r.argv)
    else
      n = n + 1
      note = function(name) bump(cmds, caller(4) .. '\t' .. name) end
      local before = 0
      for _, v in pairs(byfn) do before = before + v end
      debug.sethook(hook, 'c', 1)
      local res = fns[r.fn](r.keys, r.argv)
      debug.sethook()
      note = nil
      local after = 0
      for _, v in pairs(byfn) do after = after + v end
      perkind[r.fn] = perkind[r.fn] or {0, 0}
      perkind[r.fn][1], perkind[r.fn][2] = perkind[r.fn][1] + 1, perkind[r.fn][2] + after - before
      local same = ci == #r.calls
      for i = 1, math.max(#res, #r.res) do
        if tostring(res[i]) ~= tostring(r.res[i]) then same = false end
      end
      if not same then bad = bad + 1 end
      total = total + after - before
    end
  end
end

print(string.format('%d calls replayed: %d replies or command counts differ, %d commands\' arguments differ', n, bad, differ))
print(string.format('Lua VM instructions a call: %.0f', total / n))
for k, v in pairs(perkind) do print(string.format('  %s: %d calls, %.0f a call', k, v[1], v[2] / v[1])) end
local function sorted(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return t[a] > t[b] end)
  return ks
end
print('\nVM instructions a call, by caller (helpers counted to theirs), with its C calls and commands a call:')
local cs, ms = {}, {}
for k, v in pairs(ccalls) do
  local f, c = k:match('^(.-)\t(.*)$')
  cs[f] = (cs[f] or '') .. string.format(' %s %.2f', c, v / n)
end
for k, v in pairs(cmds) do
  local f, c = k:match('^(.-)\t(.*)$')
  ms[f] = (ms[f] or '') .. string.format(' %s %.2f', c, v / n)
end
for _, f in ipairs(sorted(bycaller)) do
  print(string.format('%8.1f  %-22s C:%s  commands:%s', bycaller[f] / n, f, (cs[f] or ''):gsub('redis_call [%d.]+ ?', ''), ms[f] or ''))
end
print('\nVM instructions a call, by function (its own lines):')
for _, f in ipairs(sorted(byfn)) do print(string.format('%8.1f  %s', byfn[f] / n, f)) end
print('\nThe 30 lines with the most:')
for i, l in ipairs(sorted(ops)) do
  if i > 30 then break end
  local w = from[l] or {'?', 0}
  print(string.format('%8.1f  %s:%d  %s', ops[l] / n, w[1], w[2], ((src[w[1]] or {})[w[2]] or ''):gsub('^%s+', ''):sub(1, 90)))
end
