-- A worker takes a run (acquire_run.lua; its reply). A job this worker claimed was taken by the
-- claim itself (claim_jobs.lua); this call is for a job arq started (and tests).
-- Call: shared.calls.steps.Acquire.
return acquire_run(KEY.RUN, KEY.STREAM, KEY.TOOLS, ARG.RUN_ID, ARG.GEN, ARG.LEASE_ID)
