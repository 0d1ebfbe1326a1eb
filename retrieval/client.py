"""The typed HTTP client, kept under its old name for existing callers: it is the light client
distribution `retrieval-client` (`clients/python`, import `retrieval_client`), which depends on
nothing of the server. New code imports `retrieval_client`."""

from retrieval_client import *  # noqa: F403
from retrieval_client import __all__ as __all__
