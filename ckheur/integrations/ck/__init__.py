"""CK's files: tile_engine CSV in, dispatcher model folders out, CK's features."""
