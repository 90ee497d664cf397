-- One run: create it (or answer for the one already there). KEYS/ARGV/reply: see submit_one.lua.
return submit_one(KEYS, ARGV)
