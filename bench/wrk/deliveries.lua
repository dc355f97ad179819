-- Pre-signed GitHub deliveries for wrk, written by bench/wrk.py.
--
--   wrk -t1 -c32 -d10s --latency -s bench/wrk/deliveries.lua URL -- FILE MODE [BURST [THREADS]]
--
-- FILE: line 1 the request path, line 2 the X-GitHub-Event value, lines 3 and 4 the body
-- before and after the delivery id (the body is PREFIX .. id .. SUFFIX, and that is what
-- was signed), then one delivery a line: "<X-GitHub-Delivery> <hex HMAC-SHA256 of the body>".
--
-- MODE:
--   new    each request the next delivery (a fresh event id); past the end of the file the
--          ids wrap around and become duplicates (done() reports it: "wrapped")
--   dup    the same, over a small file of ids delivered before: every request a duplicate
--   burst  BURST consecutive requests carry the same delivery, then the next one: with as
--          many connections as BURST, the copies of one event are in flight together
--
-- With several threads (-t), thread k takes deliveries k, k+T, k+2T, … so no two threads
-- share an id. done() prints one line "WRKJSON {…}" with exact figures for bench/wrk.py
-- (wrk's own counts and latency percentiles in µs, the request() calls, and "wrapped").

local threads = {}
local next_tid = 0

function setup(thread)
   thread:set("tid", next_tid)
   next_tid = next_tid + 1
   table.insert(threads, thread)
end

-- Globals (not locals) so that done(), which runs in the main Lua state, can read them from
-- each thread with thread:get().
counter = 0
n = 0
mode = "new"
burst = 50
local ids, sigs = {}, {}
local path, event, prefix, suffix
local stride, first

function init(args)
   local file = assert(args[1], "deliveries file expected after --")
   mode = args[2] or "new"
   burst = tonumber(args[3] or "50")
   stride = tonumber(args[4] or "1")
   -- Paced load: the pause (ms) a connection waits after an answer before its next request.
   -- Defined only when pacing: wrk times every request through delay() once it exists.
   local pause = tonumber(args[5] or "0")
   if pause > 0 then
      delay = function() return pause end
   end
   first = tid or 0
   local f = assert(io.open(file, "r"))
   path = f:read("*l")
   event = f:read("*l")
   prefix = f:read("*l")
   suffix = f:read("*l")
   for line in f:lines() do
      local id, sig = line:match("^(%S+) (%x+)$")
      if id then
         n = n + 1
         ids[n] = id
         sigs[n] = "sha256=" .. sig
      end
   end
   f:close()
   assert(n > 0, "no deliveries in " .. file)
end

function request()
   local k = counter
   if mode == "burst" then
      k = math.floor(counter / burst)
   end
   counter = counter + 1
   local i = (first + k * stride) % n + 1
   local id = ids[i]
   return wrk.format("POST", path, {
      ["Content-Type"] = "application/json",
      ["User-Agent"] = "GitHub-Hookshot/bench",
      ["X-GitHub-Event"] = event,
      ["X-GitHub-Delivery"] = id,
      ["X-Hub-Signature-256"] = sigs[i],
   }, prefix .. id .. suffix)
end

function done(summary, latency, requests)
   -- "wrapped": deliveries sent again because a thread ran past the end of the file.
   local calls, wrapped = 0, 0
   for k, thread in ipairs(threads) do
      local c, size = thread:get("counter") or 0, thread:get("n") or 0
      local m = thread:get("mode")
      calls = calls + c
      local used = c
      if m == "burst" then
         used = math.ceil(c / thread:get("burst"))
      end
      local available = math.ceil((size - (k - 1)) / #threads)
      if m ~= "dup" and used > available then
         wrapped = wrapped + (used - available)
      end
   end
   local e = summary.errors
   io.write(string.format(
      'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,' ..
      '"write":%d,"status":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
      '"p999_us":%d,"max_us":%d,"mean_us":%.1f,"calls":%d,"wrapped":%d}\n',
      summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
      e.status, e.timeout, latency:percentile(50), latency:percentile(90),
      latency:percentile(99), latency:percentile(99.9), latency.max, latency.mean,
      calls, math.floor(wrapped)))
end
