"""Any other PEP 249 module, named by ``driver=`` (as adbapi's ``dbapiName``).

The module's connections are assumed to open transactions implicitly, so adb
commits after every standalone call and rolls back after a failed one.
"""

from .base import Driver


class GenericDriver(Driver):
    """The PEP 249 defaults of ``Driver``, unchanged."""


DRIVER = GenericDriver
