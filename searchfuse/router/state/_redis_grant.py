"""The grant on Redis in one round trip: a Lua script decides and writes atomically.

`acquire` (state/_grant.py) is the meaning of a grant: the budgets, the 429
hold, the key's state, a slot in its pacing log, the search counted in
advance. The script decides all of it, the budgets' tallies included (their
periods, and expiries that move on a refusal too). On Redis, running it as an
optimistic transaction costs several round trips and, with writers racing,
retries (`WATCH`/`MULTI`). This script makes the same decision, in the same
order, on the server, in one `EVALSHA`: nothing else runs on the server
meanwhile, so it is atomic across every process and host.

It decides only on values it reads cleanly. Anything else -- a month this
process has not seen yet (a rollover is due), a value that is not a plain
number or flag (reset with a warning by the careful path), a pacing log of
another size or holding a time later than now by more than a race between
processes (rebuilt or clamped, see `_trust`) -- answers "careful", and the
store runs `acquire` itself as a transaction, as every other store does.
`tests/stores/test_redis_grant.py` holds the script to `acquire`, case by case.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import replace
from typing import Any

from searchfuse._format import amount
from searchfuse.router.state._budgets import Line, period_end
from searchfuse.router.state._events import Event, EventKind
from searchfuse.router.state._grant import GRANTED, GRANTED_CLEAN, Charge, Grant, search_log
from searchfuse.router.state._records import Availability
from searchfuse.router.state._redis_tx import month_end
from searchfuse.router.state._trust import RACE

__all__ = ["GRANT", "script_grant"]

# KEYS: month, hold, key, account, log, seq, revs, then one tally per budget line.
# ARGV: month, now, honour (1/0), rpm ("": no pacing), window, log ttl ms,
#       charge (1/0), credits, account ("": none), the records' keep-until (a day
#       after the month's end, on the router's clock, as `keep_ms`), key rev name,
#       account rev name, lines, then per line: period, limit, amount, keep until
#       ("": for ever), the latest period believed (`Line.latest`).
# Every value is checked before anything is written: "careful" never follows a write.
# The answer is one text, its words joined by "|" (cheaper to send and read than a list).
GRANT = (
    """
local call, find, format, tonumber = redis.call, string.find, string.format, tonumber
-- A stored number as the stores' reader takes it (`_values._parse`). A plain
-- decimal is the common case; anything else is looked at closely: Lua's
-- tonumber also reads hexadecimal ("0x10") and stops at a NUL ("5\\0..."),
-- which that reader resets.
local function num(v)
  if v == false or v == nil or v == '' then return nil, true end
  if find(v, '^%-?%d+%.?%d*$') then
    local n = tonumber(v)
    if n <= 1e15 and n >= -1e15 then return n, true end
    return nil, false
  end
  if find(v, '[xX%z]') then return nil, false end
  local n = tonumber(v)
  if n == nil or n ~= n or n == math.huge or n == -math.huge or math.abs(n) > 1e15 then
    return nil, false
  end
  return n, true
end
-- A number as the stores write it (Python's repr reads back as the same double):
-- a whole number as digits, anything else to 17 significant digits.
local function fmt(x)
  if x % 1 == 0 and x ~= 0 and x < 1e15 and x > -1e15 then return format('%d', x) end
  return format('%.17g', x)
end
-- An optional field stored empty reads as none.
local function none(v) return v == false or v == '' end
-- A record's expiry set to `ms` from now, unless it already ends between `low`
-- and `high` ms from now (a refresh is a write; most calls need none).
local function expire(name, ms, low, high)
  local ttl = call('PTTL', name)
  if ttl < low or ttl > high then call('PEXPIRE', name, ms) end
end
local RACE = """
    + repr(RACE)
    + """
if call('GET', KEYS[1]) ~= ARGV[1] then return 'careful' end
local now = tonumber(ARGV[2])
local lines = tonumber(ARGV[13])
-- Budget tallies, by key name: {period, used, expires} (nil: none stored).
local tally = {}
for i = 1, lines do
  local name = KEYS[7 + i]
  if tally[name] == nil then
    local t = call('HMGET', name, 'period', 'used', 'expires')
    if t[1] == false and t[2] == false then
      tally[name] = false
    else
      local u, ok = num(t[2])
      local e, ok2 = num(t[3])
      if t[1] == false or not ok or not ok2 or u == nil or u < 0 then return 'careful' end
      local p = t[1]
      if not (p == '' or p:match('^%d%d%d%d%-%d%d$') or p:match('^%d%d%d%d%-%d%d%-%d%d$')) then
        return 'careful'  -- compared as text below: only labels that sort as periods
      end
      -- A period after the next one is not believed: told and overwritten there.
      if p > ARGV[13 + (i - 1) * 5 + 5] then return 'careful' end
      tally[name] = {t[1], u, e}
    end
  end
end
local function live(name, period)
  local t = tally[name]
  return t and t[1] >= period and (t[3] == nil or now < t[3]) and t or nil
end
local function keep(b, t)
  local k = ARGV[b + 4]
  if k == '' then return nil end
  k = tonumber(k)
  if t ~= nil and t[3] ~= nil and t[3] > k then return t[3] end
  return k
end
local function put(name, t)
  tally[name] = t
  call('HSET', name, 'period', t[1], 'used', fmt(t[2]), 'expires', t[3] and fmt(t[3]) or '')
  if t[3] ~= nil then
    call('PEXPIRE', name, math.max(1000, math.ceil((t[3] - now) * 1000)))
  else
    call('PERSIST', name)
  end
end
for i = 1, lines do
  local b = 13 + (i - 1) * 5
  local t = live(KEYS[7 + i], ARGV[b + 1])
  local u = t and t[2] or 0
  if u + tonumber(ARGV[b + 3]) > tonumber(ARGV[b + 2]) + 1e-9 then
    -- A refused spender is still active: its live tallies' expiries move on.
    for j = 1, lines do
      local c = 13 + (j - 1) * 5
      local name = KEYS[7 + j]
      local s = live(name, ARGV[c + 1])
      if s then
        local kept = keep(c, s)
        if kept ~= s[3] then put(name, {s[1], s[2], kept}) end
      end
    end
    return 'budget|' .. i .. '|' .. fmt(u) .. '|' .. (t and t[1] or ARGV[b + 1])
  end
end
if ARGV[3] == '1' then
  local h = call('HMGET', KEYS[2], 'until', 'key')
  local u, ok = num(h[1])
  if not ok then return 'careful' end
  if u ~= nil and u > now then
    -- The stores read the hold's key as text masked and cut: only a plain name here.
    local who = h[2] or ''
    if #who > 64 or not who:match('^[%w_]*$') then return 'careful' end
    return 'held|' .. fmt(u - now) .. '|' .. who
  end
end
local k = call('HMGET', KEYS[3], 'disabled', 'cooldown_until', 'exhausted',
  'last_status', 'last_error', 'cooldown_reason', 'cooldown_started', 'searches',
  'local_credits', 'account')
if k[1] ~= false and k[1] ~= '0' and k[1] ~= '1' then return 'careful' end
if k[3] ~= false and k[3] ~= '0' and k[3] ~= '1' then return 'careful' end
local cooldown, ok1 = num(k[2])
local started, ok2 = num(k[7])
local searches, ok3 = num(k[8])
local credits_used, ok4 = num(k[9])
local status, ok5 = num(k[4])
if not (ok1 and ok2 and ok3 and ok4 and ok5) then return 'careful' end
if searches ~= nil and (searches < 0 or searches ~= math.floor(searches)) then
  return 'careful'
end
if k[1] == '1' then return 'blocked|inf|disabled' end
if cooldown ~= nil and cooldown > now then
  -- Parked as out of quota until its provider's reset: exhausted until then.
  local why = k[6] == 'exhausted' and 'exhausted' or 'cooling'
  return 'blocked|' .. fmt(cooldown - now) .. '|' .. why
end
if k[3] == '1' then return 'blocked|inf|exhausted' end
local acct = nil
if ARGV[7] == '1' then
  local a, ok = num(call('HGET', KEYS[4], 'local_credits'))
  if not ok or (a ~= nil and a < 0) then return 'careful' end
  acct = a or 0
end
if ARGV[4] ~= '' then
  local limit = tonumber(ARGV[4])
  local r = call('HMGET', KEYS[5], 'size', 'seq')
  local size, seq, oldest = limit, 0, nil
  if r[1] == false and r[2] == false then
    if call('EXISTS', KEYS[5]) == 1 then return 'careful' end
  else
    -- Whole numbers as the stores' reader takes them (`int`), else rebuilt there.
    if not (r[1] and find(r[1], '^%d+$') and r[2] and find(r[2], '^%d+$') and #r[2] < 16) then
      return 'careful'
    end
    size, seq = tonumber(r[1]), tonumber(r[2])
    if size ~= limit then return 'careful' end
    local n, ok = num(call('HGET', KEYS[5], 's' .. format('%d', seq % size)))
    if not ok or (n ~= nil and n > now + RACE) then return 'careful' end
    oldest = n
  end
  local window = tonumber(ARGV[5])
  if oldest ~= nil and oldest + window > now then
    return 'paced|' .. fmt(oldest + window - now)
  end
  local slot, after = 's' .. format('%d', seq % size), format('%d', seq + 1)
  if r[1] == ARGV[4] then
    call('HSET', KEYS[5], slot, ARGV[2], 'seq', after)
  else
    call('HSET', KEYS[5], slot, ARGV[2], 'seq', after, 'size', ARGV[4])
  end
  -- The log must outlive its newest slot by a window: kept for two, refreshed
  -- once less than one is left.
  local ttl = tonumber(ARGV[6])
  expire(KEYS[5], ttl, ttl / 2, ttl)
end
-- The answer: the verdict, clean (1/0), then each budget line's use and period.
local out = {'ok', '0'}
local done = {}
for i = 1, lines do
  local b = 13 + (i - 1) * 5
  local name = KEYS[7 + i]
  local t = live(name, ARGV[b + 1])
  if not done[name] then
    done[name] = true
    t = {t and t[1] or ARGV[b + 1], (t and t[2] or 0) + tonumber(ARGV[b + 3]), keep(b, t)}
    put(name, t)
  end
  out[#out + 1] = fmt(t[2])
  out[#out + 1] = t[1]
end
if acct ~= nil then
  local credits = tonumber(ARGV[8])
  local fields = {'searches', format('%d', (searches or 0) + 1), 'last_used_at', ARGV[2],
    'local_credits', fmt((credits_used or 0) + credits)}
  -- The key's account, written only when it changes.
  if ARGV[9] == '' then
    if k[10] ~= false then call('HDEL', KEYS[3], 'account') end
  elseif k[10] ~= ARGV[9] then
    fields[7], fields[8] = 'account', ARGV[9]
  end
  call('HSET', KEYS[3], unpack(fields))
  call('HSET', KEYS[4], 'local_credits', fmt(acct + credits))
  -- Kept until a day after the month ends on the router's clock, as every write
  -- keeps them (`keep_ms`): moved only when they end before, or an hour after.
  local ms = math.max(1000, math.ceil((tonumber(ARGV[10]) - now) * 1000))
  expire(KEYS[3], ms, ms, ms + 3600000)
  expire(KEYS[4], ms, ms, ms + 3600000)
  local rev = call('INCR', KEYS[6])
  call('ZADD', KEYS[7], rev, ARGV[11], rev, ARGV[12])
  if status == 200 and none(k[5]) and none(k[2]) and none(k[6])
    and none(k[7]) and k[3] ~= '1' then
    out[2] = '1'
  end
end
return table.concat(out, '|')
"""
)

_BLOCKED = {
    "disabled": Availability.DISABLED,
    "cooling": Availability.COOLING,
    "exhausted": Availability.EXHAUSTED,
}


def script_grant(
    store: Any,
    month: str,
    now: float,
    fp: str,
    *,
    rpm: int | None,
    window: float,
    honour_hold: bool,
    charge: Charge | None,
    spend: tuple[Line, ...],
) -> Grant | None:
    """The grant decided by `GRANT` in one round trip; `None` when the script asks
    for the careful path (see the module docstring)."""
    # A search asks with the same key, charge and budgets as the last one: the
    # script's command is packed once; only now and each budget's keep-until
    # (a conversation's moves with now) change per call.
    # (The latest period believed follows from the period and its end: worked
    # out when the command is made, not on every call.)
    lines = tuple(
        (line.name, line.period, line.limit, line.amount, line.resets_at) for line in spend
    )
    ask = (month, fp, rpm, window, honour_hold, charge, lines)
    made = _MADE.get(store)
    if made is None or made[0] != ask:
        keys, args = _call_for(store, ask)
        holes = (1, *(_KEEP + 5 * i for i in range(len(spend))))
        made = _MADE[store] = (ask, store.packed_script(keys, args, holes))
    fill = [repr(now).encode()]
    for line in spend:
        fill.append(b"" if line.keep_until is None else repr(line.keep_until).encode())
    answer = store.run_script(made[1], fill).split("|")
    verdict = answer[0]
    if verdict == "careful":
        return None
    if verdict == "ok":
        if spend:
            spent = tuple(
                _counted(line, float(answer[2 + 2 * i]), answer[3 + 2 * i])
                for i, line in enumerate(spend)
            )
            return Grant("ok", clean=answer[1] == "1", spent=spent)
        return GRANTED_CLEAN if answer[1] == "1" else GRANTED
    if verdict == "held":
        return Grant("held", float(answer[1]), hold_key=answer[2] or None)
    if verdict == "blocked":
        wait = math.inf if answer[1] == "inf" else float(answer[1])
        return Grant("blocked", wait, _BLOCKED[answer[2]])
    if verdict == "paced":
        return Grant("paced", float(answer[1]))
    refused = _counted(spend[int(answer[1]) - 1], float(answer[2]), answer[3])
    wait = refused.wait(now)
    until = refused.resets_at
    detail = f"budget {refused.name}: {amount(refused.used)} of {amount(refused.limit)} used"
    store.log_events([Event(now, EventKind.BUDGET, None, fp, detail, until and wait, until)])
    return Grant("budget", wait, over=refused)


#: The last call's question and its command, per store (see `script_grant`).
_MADE: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()
#: Where the first budget line's keep-until is in the script's arguments.
_KEEP = 16


def _call_for(store: Any, ask: tuple[Any, ...]) -> tuple[list[bytes], list[bytes]]:
    """The script's keys and arguments for `ask`."""
    month, fp, rpm, window, honour_hold, charge, lines = ask
    keys = [
        store.month_key,
        store.hold_key,
        store.k(fp),
        store.a(charge.account_id if charge else ""),
        store.ring_key(search_log(fp)),
        store.seq_key,
        store.revs_key,
    ]
    args: list[Any] = [
        month,
        "",
        "1" if honour_hold else "0",
        "" if rpm is None else str(rpm),
        repr(window),
        max(1, math.ceil(window * 2 * 1000)),
        "1" if charge else "0",
        repr(charge.credits) if charge else "0",
        (charge.account or "") if charge else "",
        repr(month_end(month) + 86400),
        f"k:{fp}",
        f"a:{charge.account_id}" if charge else "",
        len(lines),
    ]
    for name, period, limit, cost, resets_at in lines:
        keys.append(store.tally_key(name))
        latest = Line(0, name, period, limit, cost, resets_at).latest()
        args += [period, repr(limit), repr(cost), "", latest]
    return [k.encode() for k in keys], [str(a).encode() for a in args]


def _counted(line: Line, used: float, period: str) -> Line:
    """`line` with `used`, counted in `period`: a later one than the line's own when
    another process's clock is ahead (then it also resets when that ends)."""
    if period == line.period:
        # As `replace(line, used=used)`, without its look at the fields (every search).
        return Line(
            line.index,
            line.name,
            line.period,
            line.limit,
            line.amount,
            line.resets_at,
            used,
            line.keep_until,
        )
    return replace(line, period=period, resets_at=period_end(period), used=used)
