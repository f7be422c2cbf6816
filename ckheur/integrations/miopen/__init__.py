"""MIOpen's files: the find-db codec, its exact-tier answers and import, TunaNet."""
