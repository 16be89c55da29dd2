"""Support: the small helpers every layer may use (time, durable files, path safety,
durations, retries, isolated child processes, read deadlines, test crash points, text UTF-8
cannot write). It imports nothing else of dispatch's."""
