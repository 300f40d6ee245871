"""SGLang's own dumper (``dump``) and the alignment of two runs' steps by their tokens (``align``)."""
