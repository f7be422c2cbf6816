"""Other tools' files (CK's, MIOpen's): imported only by stages and exporting, never by the core."""
