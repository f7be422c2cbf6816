"""Other tools' files (CK's, MIOpen's): imported by stages, and by the core only through ckheur.formats."""
