"""One function per job kind: typed spec + run directory in, typed result out (called by verbs, scripts and tests)."""
