"""torch's tensor files (``.pth``/``.pt``), shared by every reader that meets one: torch.save's zip
archive read without torch (``reader``: its pickle run by ``unpickler``, its views checked by
``views``), what only torch reads (``fallback``), tensors to and from torch (``arrays``), and a file's
storages told from its zip directory alone (``storage_digest``)."""
