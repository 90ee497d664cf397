-- KEYS: run, stream, tools
-- ARGV: runId, gen, worker lease id
-- A worker takes a run (acquire_run.lua; its reply). A job this worker claimed was taken by the
-- claim itself (claim_jobs.lua); this call is for a job arq started (and tests).
return acquire_run(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])
