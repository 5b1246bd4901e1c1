"""The DIAL XML Schemas (lenient and strict), shipped as package data."""
