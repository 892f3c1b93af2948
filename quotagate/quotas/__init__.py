"""Pure quota engine (token buckets, entity resolution); no I/O, the time is always an argument."""
