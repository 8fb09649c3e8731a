"""Stream catalog: streams, typed columns and widths, operator profiles (TOML)."""

from cqopt.catalog.catalog import (
    Catalog,
    Column,
    EngineConstants,
    JoinStrategyConstants,
    OperatorRates,
    PipesConstants,
    Stream,
    find_column,
    load_catalog,
)
from cqopt.catalog.errors import CatalogError
from cqopt.errors import CqoptError

__all__ = [
    "Catalog", "CatalogError", "Column", "CqoptError", "EngineConstants", "JoinStrategyConstants",
    "OperatorRates", "PipesConstants",
    "Stream", "find_column", "load_catalog",
]
