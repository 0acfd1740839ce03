"""Sites: the ZVMs this service is configured to talk to.

``site_client`` is the one way every other part gets a ZVM client; the services below are the only code that
creates or changes a ``Site``.
"""

from rewind.sites.services import (
    ProbeReport,
    SiteCheck,
    clock_skew_warning,
    site_availability,
    site_availability_text,
    site_base_url_clean,
    site_check,
    site_check_limit_s,
    site_circuit,
    site_client,
    site_clock_offset_s,
    site_connection,
    site_create,
    site_record_clock,
    site_register,
    site_request_cap,
    site_update,
    sites_check,
    sites_probe,
)

__all__ = [
    "ProbeReport",
    "SiteCheck",
    "clock_skew_warning",
    "site_availability",
    "site_availability_text",
    "site_base_url_clean",
    "site_check",
    "site_check_limit_s",
    "site_circuit",
    "site_client",
    "site_clock_offset_s",
    "site_connection",
    "site_create",
    "site_record_clock",
    "site_register",
    "site_request_cap",
    "site_update",
    "sites_check",
    "sites_probe",
]
