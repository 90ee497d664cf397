"""Size bounds for everything a caller can send. Oversized input is refused with a clear error."""

__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_BATCH_ITEMS",
    "MAX_BATCH_OFFSET",
    "MAX_COMPACT_THRESHOLD",
    "MAX_CONCURRENCY_KEY_CHARS",
    "MAX_CONCURRENCY_LIMIT",
    "MAX_DEBOUNCE_MS",
    "MAX_ID_CHARS",
    "MAX_IMAGE_DATA_BYTES",
    "MAX_IMAGE_PARTS",
    "MAX_IMAGE_URL_CHARS",
    "MAX_INDEX_RUNS",
    "MAX_INPUT_MESSAGES",
    "MAX_MAP_BYTES",
    "MAX_MESSAGE_CHARS",
    "MAX_META_KEY_CHARS",
    "MAX_META_TERMS",
    "MAX_META_VALUE_CHARS",
    "MAX_MS_DIGITS",
    "MAX_PRIORITY",
    "MAX_RATE_LIMIT",
    "MAX_RATE_PERIOD_S",
    "MAX_RESTORED_BYTES",
    "MAX_RESULT_MESSAGES",
    "MAX_RESULT_MESSAGES_BYTES",
    "MAX_RUN_AT_MS",
    "MAX_RUN_IMAGE_BYTES",
    "MAX_RUN_INPUT_BYTES",
    "MAX_SCHEDULE_INPUT_BYTES",
    "MAX_SCHEMA_BRANCHES",
    "MAX_SCHEMA_BYTES",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_NODES",
    "MAX_SCHEMA_PATTERN_CHARS",
    "MAX_SCHEMA_STEPS",
    "MAX_SCRIPT_DELAY_MS",
    "MAX_SEQ",
    "MAX_TOOL_NAMES",
    "MAX_TOOL_RESPONSE_BYTES",
    "MAX_TOOL_RESULT_CHARS",
    "MAX_TOOL_RETRY_DELAY_MS",
    "MAX_TOOL_TIMEOUT_S",
    "MAX_WEBHOOK_RESPONSE_BYTES",
    "MIN_PRIORITY",
    "SESSION_CALLS_KEPT",
    "SESSION_LOOPS_KEPT",
    "SESSION_RUNS_SHOWN",
]


MAX_INPUT_MESSAGES = 200
MAX_COMPACT_THRESHOLD = 100_000  # RunInput.compactThreshold (messages)
MAX_MESSAGE_CHARS = 100_000
MAX_RUN_INPUT_BYTES = 1_000_000
# A schedule's run template (ScheduleInput.input) as stored (compact JSON): kept for the schedule's
# life and copied into every run it makes, so smaller than a run's input. Past it: 413 too_large.
MAX_SCHEDULE_INPUT_BYTES = 64_000

# What a retry or fork stores to start from, beside its input (itself within MAX_RUN_INPUT_BYTES, and a
# fork's inputMessages within the inputMessages bounds): the state it starts from (a retry: the run's last
# checkpoint; a fork: the state at its seq, its transcript up to it) and the tool records it copies.
# Past it: 413 too_large naming the size. It bounds the one script call that writes the new run too.
MAX_RESTORED_BYTES = 4_000_000
# Images in inputMessages (content parts): an https URL's length; a data: URL's size; all of a run's
# data: URLs together; parts per run. Past a size: 413 too_large (producer/prepared.py).
MAX_IMAGE_URL_CHARS = 2_048
MAX_IMAGE_DATA_BYTES = 512_000
MAX_RUN_IMAGE_BYTES = 768_000
MAX_IMAGE_PARTS = 16
MAX_MAP_BYTES = 64_000  # runtimeInitData, runtimeHints, metadata (each, as JSON)
# A JSON Schema a run or a tool brings (responseFormat.jsonSchema.schema, a client tool's parameters,
# an MCP server's inputSchema and outputSchema): bounded before it runs (shared/schema_bounds.py). Past a
# bound: 422 schema_too_complex at submission, an error tool result for an MCP tool.
MAX_SCHEMA_BYTES = 32_000  # its JSON
MAX_SCHEMA_DEPTH = 32  # nesting of its JSON (objects and arrays)
MAX_SCHEMA_NODES = 10_000  # schema objects visited with every $ref followed where it stands
MAX_SCHEMA_BRANCHES = 500  # allOf/anyOf/oneOf subschemas among those
MAX_SCHEMA_PATTERN_CHARS = 1_000  # one pattern or patternProperties key (run by RE2: linear time)
MAX_SCHEMA_STEPS = 5_000  # keyword evaluations validating one value: past it the check fails
MAX_TOOL_NAMES = 128
MAX_ID_CHARS = 128
MAX_TOOL_RESULT_CHARS = 64_000
MAX_BATCH_ITEMS = 1_000
MAX_BATCH_OFFSET = 10**15  # a batch part's offset: derived run ids stay far below MAX_ID_CHARS
MAX_MS_DIGITS = 16  # a time in ms (a listing's createdBefore/After and cursor): past year 300,000

# Bounds on what a profile or a test script may ask for (a caller cannot hold a worker slot longer).
MAX_TOOL_TIMEOUT_S = 300.0  # one tool attempt
MAX_TOOL_RETRY_DELAY_MS = 60_000
MAX_SCRIPT_DELAY_MS = 60_000  # a scripted turn's delayMs (test profiles only)
MAX_SEQ = 2**63 - 1  # an event seq (events?after=, Last-Event-ID) above this is refused
MAX_TOOL_RESPONSE_BYTES = 1_000_000  # an HTTP tool's response body is cut (the call fails) past this
MAX_WEBHOOK_RESPONSE_BYTES = 64_000  # a webhook receiver's answer is not needed beyond its status
MAX_INDEX_RUNS = 100_000  # most runs one listing index (per tenant and filter value) keeps
MAX_META_TERMS = 16  # metadata keys a run is listed under (the first ones with scalar values)
MAX_META_KEY_CHARS = 64
MAX_META_VALUE_CHARS = 256
# includeMessages: result.messages keeps the newest messages of the final transcript within both
# bounds (result.messagesOmitted counts the older ones left out).
MAX_RESULT_MESSAGES = 500
MAX_RESULT_MESSAGES_BYTES = 512_000  # their JSON, together
SESSION_RUNS_SHOWN = 1_000  # newest runs a session view reads (commit.lua trims a session's list to as many)
# newest run loops a session keeps (commit.lua trims to as many): the most a run loads (maxHistoryLoops)
SESSION_LOOPS_KEPT = 1_000
SESSION_CALLS_KEPT = (
    5_000  # newest tool calls a session lists for search_history (commit.lua trims to as many)
)
MAX_CONCURRENCY_KEY_CHARS = 128  # RunInput.concurrency.key
MAX_CONCURRENCY_LIMIT = 1_000  # RunInput.concurrency.limit: runs of one key at once
MAX_DEBOUNCE_MS = 3_600_000  # RunInput.debounce.periodMs
MAX_RATE_LIMIT, MAX_RATE_PERIOD_S = 100_000, 86_400  # RunInput.rate: starts per period, the period
MIN_PRIORITY, DEFAULT_PRIORITY, MAX_PRIORITY = 0, 5, 9  # RunInput.priority: higher runs first
MAX_RUN_AT_MS = 10**14 - 1  # RunInput.runAt (epoch ms, past year 5000): exact in Lua's "%.14g" numbers
