"""The API's version: the client's distribution and the API's OpenAPI document both read it."""

__version__ = "0.1.0"
