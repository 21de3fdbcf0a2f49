"""The Lua scripts of the Redis store, by name. Redis runs each script atomically (no other
command runs in between), so a script's checks and writes are one indivisible step.

Keys of one run (``P`` is the store's key prefix)::

    P:head:RUN   hash   seq fence owner expires (the head) + task phase turns tokens updated (summary)
    P:rec:RUN    list   one element per save record: "SEQ CHECKSUM BODY", in seq order
    P:led:RUN    hash   idempotency key -> "CHECKSUM JSON" of the ledger entry
    P:runs       zset   run ids that have records, scored by updated_at
    P:subs       hash   run id -> JSON of its submission (for workers)
    P:queue      zset   submitted runs not yet seen finished, by submission time (what claims scan)

A missing ``fence`` field means the run has no head. Numbers travel as decimal strings; times
are compared as numbers (a string that round-trips: Python's ``repr``, Lua's ``%.17g``).
"""

from __future__ import annotations

# KEYS: head. ARGV: has_expected (0/1), seq, fence, owner, expires (expected), fence, owner, expires (new).
SWAP_HEAD = """
local cur = redis.call('HMGET', KEYS[1], 'seq', 'fence', 'owner', 'expires')
if ARGV[1] == '0' then
    if cur[2] then return 0 end
else
    if not cur[2] then return 0 end
    if (cur[1] or '0') ~= ARGV[2] or cur[2] ~= ARGV[3] or (cur[3] or '') ~= ARGV[4]
       or tonumber(cur[4]) ~= tonumber(ARGV[5]) then
        return 0
    end
end
redis.call('HSET', KEYS[1], 'seq', cur[1] or '0', 'fence', ARGV[6], 'owner', ARGV[7], 'expires', ARGV[8])
return 1
"""

# KEYS: head, rec, led, runs. ARGV: expect_seq, fence ('' = unchecked), seq, record element,
# task, phase, turns, tokens, updated, run_id, then ledger (key, value) pairs.
WRITE_RECORD = """
local cur = redis.call('HMGET', KEYS[1], 'seq', 'fence')
local fence = cur[2] or '0'
if ARGV[2] ~= '' and fence ~= ARGV[2] then return 0 end
if (cur[1] or '0') ~= ARGV[1] then return 0 end
for i = 11, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
redis.call('RPUSH', KEYS[2], ARGV[4])
redis.call('HSET', KEYS[1], 'seq', ARGV[3], 'fence', fence, 'task', ARGV[5], 'phase', ARGV[6],
           'turns', ARGV[7], 'tokens', ARGV[8], 'updated', ARGV[9])
if not cur[2] then redis.call('HSET', KEYS[1], 'owner', '', 'expires', '0.0') end
redis.call('ZADD', KEYS[4], ARGV[9], ARGV[10])
return 1
"""

# KEYS: head, rec, led, runs. ARGV: expect_seq, fence, seq (last), task, phase, turns, tokens,
# updated, run_id, record count N, N record elements, then ledger (key, value) pairs.
REPLACE_RECORDS = """
local cur = redis.call('HMGET', KEYS[1], 'seq', 'fence')
local fence = cur[2] or '0'
if ARGV[2] ~= '' and fence ~= ARGV[2] then return 0 end
if (cur[1] or '0') ~= ARGV[1] then return 0 end
local n = tonumber(ARGV[10])
redis.call('DEL', KEYS[2])
for i = 11, 10 + n do redis.call('RPUSH', KEYS[2], ARGV[i]) end
for i = 11 + n, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'seq', ARGV[3], 'fence', fence, 'task', ARGV[4], 'phase', ARGV[5],
           'turns', ARGV[6], 'tokens', ARGV[7], 'updated', ARGV[8])
if not cur[2] then redis.call('HSET', KEYS[1], 'owner', '', 'expires', '0.0') end
redis.call('ZADD', KEYS[4], ARGV[8], ARGV[9])
return 1
"""

# KEYS: head, led. ARGV: fence ('' = unchecked), key, value, only_if_absent (0/1).
# Returns {1} when written, {0, stored} when the key existed (insert-if-absent), {-1} when the
# fence is not the head's.
WRITE_ENTRY = """
if ARGV[1] ~= '' and (redis.call('HGET', KEYS[1], 'fence') or '0') ~= ARGV[1] then return {-1} end
if ARGV[4] == '1' then
    local stored = redis.call('HGET', KEYS[2], ARGV[2])
    if stored then return {0, stored} end
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return {1}
"""

# KEYS: subs, queue. ARGV: run_id, submission JSON, submitted_at. Returns nil when queued now, else
# the queued JSON. The queue (a sorted set by submission time) holds the runs workers may still claim.
ADD_SUBMISSION = """
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if stored then return stored end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return false
"""

# KEYS: head, queue. ARGV: owner, ttl, unclaimable phases, finished phases (comma-separated), run
# id, the holder the caller judged ('' = nobody). Claims the run's lease iff its phase is
# claimable, nobody holds a live lease on the server's clock, and its holder is still the one the
# caller judged by the claim rule (stores.backend.claimable: a holder alive on this host keeps its
# run), in one step (so a run that finished a moment ago, or whose lease changed hands since the
# caller read it, is never claimed).
# A finished run leaves the queue. The new fence is stores.base.next_fence (one more than the
# stored one, never below the server's clock in us; doubles hold it exactly). Returns {fence,
# expires, previous fence} or nil.
CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local cur = redis.call('HMGET', KEYS[1], 'phase', 'owner', 'expires', 'fence', 'seq')
if cur[1] then
    for phase in string.gmatch(ARGV[4], '[^,]+') do
        if phase == cur[1] then
            redis.call('ZREM', KEYS[2], ARGV[5])
            return false
        end
    end
    for phase in string.gmatch(ARGV[3], '[^,]+') do
        if phase == cur[1] then return false end
    end
end
if (cur[2] or '') ~= ARGV[6] then return false end
if cur[2] and cur[2] ~= '' and tonumber(cur[3] or '0') > now then return false end
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = string.format('%.0f', math.max(tonumber(cur[4] or '0') + 1, floor))
local expires = string.format('%.17g', now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'seq', cur[5] or '0', 'fence', fence, 'owner', ARGV[1], 'expires', expires)
return {fence, expires, cur[4] or '0'}
"""

# KEYS: rec. ARGV: after_seq, upto_seq. The list elements that may hold after < seq <= upto (the
# caller filters), found by position, without reading the rest of the run: seqs ascend without
# repeats, so the element at index i has seq >= first + i and nothing in range lies past index
# upto - first. A lost element (damage) shifts the later ones left, so the start walks back while
# the element before it is still in range. Read-only.
RECORDS_BETWEEN = """
local first = redis.call('LINDEX', KEYS[1], 0)
if not first then return {} end
local base = tonumber(string.match(first, '^%d+'))
if not base then return redis.call('LRANGE', KEYS[1], 0, -1) end
local after, upto, n = tonumber(ARGV[1]), tonumber(ARGV[2]), redis.call('LLEN', KEYS[1])
local hi = math.min(upto - base, n - 1)
if hi < 0 then return {} end
local lo = math.min(math.max(after - base + 1, 0), n)
while lo > 0 do
    local seq = tonumber(string.match(redis.call('LINDEX', KEYS[1], lo - 1), '^%d+') or '')
    if not seq then return redis.call('LRANGE', KEYS[1], 0, hi) end
    if seq <= after then break end
    lo = lo - 1
end
if hi < lo then return {} end
return redis.call('LRANGE', KEYS[1], lo, hi)
"""

# KEYS: runs. ARGV: limit, cursor run id, cursor updated_at. The next members after the cursor
# (score descending, then member descending: the sorted set's reverse order) as a flat list
# member, score, ...; false when the cursor's run is not in the set at that score any more (the
# caller then pages by score). Read-only.
SUMMARIES_AFTER = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[2])
if not score or tonumber(score) ~= tonumber(ARGV[3]) then return false end
local rank = redis.call('ZREVRANK', KEYS[1], ARGV[2])
return redis.call('ZREVRANGE', KEYS[1], rank + 1, rank + tonumber(ARGV[1]), 'WITHSCORES')
"""

# KEYS: queue. ARGV: limit, cursor run id, cursor submitted_at. The next queued runs after the
# cursor (score ascending, then run id ascending: the sorted set's own order) as a flat list
# member, score, ...; false when the cursor's run is not in the queue at that time any more (the
# caller then pages by score). O(log queue + limit). Read-only.
QUEUE_AFTER = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[2])
if not score or tonumber(score) ~= tonumber(ARGV[3]) then return false end
local rank = redis.call('ZRANK', KEYS[1], ARGV[2])
return redis.call('ZRANGE', KEYS[1], rank + 1, rank + tonumber(ARGV[1]), 'WITHSCORES')
"""
