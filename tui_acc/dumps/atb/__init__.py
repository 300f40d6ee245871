"""ATB's own formats, shared by the readers of ATB dumps whichever tool drove the dumper (msit's
``llm dump --exec``, msprobe's ATB probe): the ``.bin`` tensor file, the probe's ``data=`` aliases,
and the numbered execution folders mapped to tokens."""
