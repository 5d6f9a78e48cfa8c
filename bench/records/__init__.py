"""Records: the run-record schema, its store (atomic writes, tolerant loading) and how a record is built."""
