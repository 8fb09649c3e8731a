"""Stream catalog: streams, typed columns and widths, operator profiles (TOML)."""

from catalog.catalog import (
    Catalog, Column, OperatorRates, PipesConstants, Stream, find_column, load_catalog,
)
from catalog.errors import CatalogError, CqoptError

__all__ = [
    "Catalog", "CatalogError", "Column", "CqoptError", "OperatorRates", "PipesConstants",
    "Stream", "find_column", "load_catalog",
]
