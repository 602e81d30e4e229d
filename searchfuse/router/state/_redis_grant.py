"""The grant on Redis in one round trip: a Lua script decides and writes atomically.

`acquire` (state/_grant.py) is the meaning of a grant: the budgets, the 429
hold, the key's state, a slot in its pacing log, the search counted in
advance. The script decides all but the budgets; a grant with budgets (their
tallies carry periods and expiries that move on a refusal too) takes the
careful path. On Redis, running it as an optimistic transaction costs several round
trips and, with writers racing, retries (`WATCH`/`MULTI`). This script makes
the same decision, in the same order, on the server, in one `EVALSHA`:
nothing else runs on the server meanwhile, so it is atomic across every
process and host.

It decides only on values it reads cleanly. Anything else -- a month this
process has not seen yet (a rollover is due), a value that is not a plain
number or flag (reset with a warning by the careful path), a pacing log of
another size or holding a time later than now (rebuilt or clamped, see
`_trust`) -- answers "careful", and the store runs `acquire` itself as a
transaction, as every other store does. `tests/stores/test_redis_grant.py`
holds the script to `acquire`, case by case.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from searchfuse.router.state._budgets import Line, period_end
from searchfuse.router.state._events import Event, EventKind
from searchfuse.router.state._grant import GRANTED, GRANTED_CLEAN, Charge, Grant, search_log
from searchfuse.router.state._records import Availability
from searchfuse.router.state._redis_tx import keep_ms

__all__ = ["GRANT", "script_grant"]

# KEYS: month, hold, key, account, log, seq, revs, then one tally per budget line.
# ARGV: month, now, honour (1/0), rpm ("": no pacing), window, log ttl ms,
#       charge (1/0), credits, account ("": none), records ttl ms, key rev name,
#       account rev name, lines, then per line: period, limit, amount, ttl ms ("": none).
GRANT = """
local function num(v)
  if v == false or v == nil or v == '' then return nil, true end
  local n = tonumber(v)
  if n == nil or n ~= n or n == math.huge or n == -math.huge or math.abs(n) > 1e15 then
    return nil, false
  end
  return n, true
end
local function fmt(x) return string.format('%.17g', x) end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'careful'} end
local now = tonumber(ARGV[2])
local lines = tonumber(ARGV[13])
local used = {}
for i = 1, lines do
  local b = 13 + (i - 1) * 4
  local t = redis.call('HMGET', KEYS[7 + i], 'period', 'used')
  local u = 0
  if t[1] == ARGV[b + 1] then
    local n, ok = num(t[2])
    if not ok or n == nil or n < 0 then return {'careful'} end
    u = n
  elseif t[1] == false and t[2] ~= false then return {'careful'} end
  used[i] = u
  if u + tonumber(ARGV[b + 3]) > tonumber(ARGV[b + 2]) + 1e-9 then
    return {'budget', tostring(i), fmt(u)}
  end
end
if ARGV[3] == '1' then
  local h = redis.call('HMGET', KEYS[2], 'until', 'key')
  local u, ok = num(h[1])
  if not ok then return {'careful'} end
  if u ~= nil and u > now then return {'held', fmt(u - now), h[2] or ''} end
end
local k = redis.call('HMGET', KEYS[3], 'disabled', 'cooldown_until', 'exhausted',
  'last_status', 'last_error', 'cooldown_reason', 'cooldown_started', 'searches',
  'local_credits')
for _, i in ipairs({1, 3}) do
  if k[i] ~= false and k[i] ~= '0' and k[i] ~= '1' then return {'careful'} end
end
local cooldown, ok1 = num(k[2])
local started, ok2 = num(k[7])
local searches, ok3 = num(k[8])
local credits_used, ok4 = num(k[9])
local status, ok5 = num(k[4])
if not (ok1 and ok2 and ok3 and ok4 and ok5) then return {'careful'} end
if searches ~= nil and (searches < 0 or searches ~= math.floor(searches)) then
  return {'careful'}
end
if k[1] == '1' then return {'blocked', 'inf', 'disabled'} end
if cooldown ~= nil and cooldown > now then return {'blocked', fmt(cooldown - now), 'cooling'} end
if k[3] == '1' then return {'blocked', 'inf', 'exhausted'} end
if ARGV[4] ~= '' then
  local limit = tonumber(ARGV[4])
  local r = redis.call('HMGET', KEYS[5], 'size', 'seq')
  local size, seq, oldest = limit, 0, nil
  if r[1] == false and r[2] == false then
    if redis.call('EXISTS', KEYS[5]) == 1 then return {'careful'} end
  else
    size, seq = tonumber(r[1]), tonumber(r[2])
    if size ~= limit or seq == nil or seq < 0 or seq ~= math.floor(seq) then
      return {'careful'}
    end
    local o = redis.call('HGET', KEYS[5], 's' .. string.format('%d', seq % size))
    local n, ok = num(o)
    if not ok or (n ~= nil and n > now) then return {'careful'} end
    oldest = n
  end
  local window = tonumber(ARGV[5])
  if oldest ~= nil and oldest + window > now then return {'paced', fmt(oldest + window - now)} end
  redis.call('HSET', KEYS[5], 's' .. string.format('%d', seq % size), ARGV[2],
    'seq', string.format('%d', seq + 1), 'size', string.format('%d', size))
  redis.call('PEXPIRE', KEYS[5], ARGV[6])
end
local out = {'ok', '0'}
local done = {}
for i = 1, lines do
  local b = 13 + (i - 1) * 4
  local u = used[i]
  if not done[KEYS[7 + i]] then
    done[KEYS[7 + i]] = u + tonumber(ARGV[b + 3])
    redis.call('HSET', KEYS[7 + i], 'period', ARGV[b + 1], 'used', fmt(done[KEYS[7 + i]]))
    if ARGV[b + 4] ~= '' then redis.call('PEXPIRE', KEYS[7 + i], ARGV[b + 4]) end
  end
  out[#out + 1] = fmt(done[KEYS[7 + i]])
end
if ARGV[7] == '1' then
  local a, ok = num(redis.call('HGET', KEYS[4], 'local_credits'))
  if not ok or (a ~= nil and a < 0) then return {'careful'} end
  local credits = tonumber(ARGV[8])
  redis.call('HSET', KEYS[3], 'searches', string.format('%d', (searches or 0) + 1),
    'last_used_at', ARGV[2], 'local_credits', fmt((credits_used or 0) + credits))
  if ARGV[9] == '' then redis.call('HDEL', KEYS[3], 'account')
  else redis.call('HSET', KEYS[3], 'account', ARGV[9]) end
  redis.call('HSET', KEYS[4], 'local_credits', fmt((a or 0) + credits))
  redis.call('PEXPIRE', KEYS[3], ARGV[10])
  redis.call('PEXPIRE', KEYS[4], ARGV[10])
  local rev = redis.call('INCR', KEYS[6])
  redis.call('ZADD', KEYS[7], rev, ARGV[11], rev, ARGV[12])
  if status == 200 and k[5] == false and k[2] == false and k[6] == false
    and k[7] == false and k[3] ~= '1' then
    out[2] = '1'
  end
end
return out
"""

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
    # script's keys and arguments are made once per hour (expiries count from
    # the hour's start, so they run at most an hour long), only now changes.
    hour = int(now // 3600)
    ask = (month, hour, fp, rpm, window, honour_hold, charge, spend)
    made = _MADE.get(store)
    if made is None or made[0] != ask:
        made = _MADE[store] = (ask, *_call_for(store, ask, hour * 3600.0))
    args = made[2].copy()
    args[1] = repr(now)
    answer = store.run_script(made[1], args)
    verdict = answer[0]
    if verdict == "careful":
        return None
    if verdict == "ok":
        if spend:
            spent = tuple(
                _with_use(line, float(u)) for line, u in zip(spend, answer[2:], strict=True)
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
    refused = _with_use(spend[int(answer[1]) - 1], float(answer[2]))
    wait = refused.wait(now)
    until = refused.resets_at
    detail = f"budget {refused.name}: {refused.used:g} of {refused.limit:g} used"
    store.log_events([Event(now, EventKind.BUDGET, None, fp, detail, until and wait, until)])
    return Grant("budget", wait, over=refused)


#: The last call's keys and arguments, per store (see `script_grant`).
_MADE: weakref.WeakKeyDictionary[Any, tuple[Any, list[str], list[Any]]] = (
    weakref.WeakKeyDictionary()
)


def _call_for(store: Any, ask: tuple[Any, ...], since: float) -> tuple[list[str], list[Any]]:
    """The script's keys and arguments for `ask`, expiries counted from `since`."""
    month, _, fp, rpm, window, honour_hold, charge, spend = ask
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
        keep_ms(month, since),
        f"k:{fp}",
        f"a:{charge.account_id}" if charge else "",
        len(spend),
    ]
    for line in spend:
        keys.append(store.tally_key(line.name))
        end = period_end(line.period)
        ttl = "" if end is None else max(1000, math.ceil((end + 86400 - since) * 1000))
        args += [line.period, repr(line.limit), repr(line.amount), ttl]
    return keys, args


def _with_use(line: Line, used: float) -> Line:
    from dataclasses import replace

    return replace(line, used=used)
