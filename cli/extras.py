"""Which optional extras (setup.cfg's ``extras_require``) each command needs, in one table.

A command run without one of them names every extra it needs at once, so one
``pip install`` is enough:

>>> missing_extras("fidelity", "matplotlib")
"cqopt fidelity needs the extras spark and report; matplotlib is not installed: pip install 'cqopt[spark,report]' (or 'cqopt[all]')"
>>> missing_extras("generate", "pandas")
"cqopt generate needs the extra generate; pandas is not installed: pip install 'cqopt[generate]' (or 'cqopt[all]')"
>>> missing_extras("build", "pandas")  # the spark extra installs pandas too
"cqopt build needs the extra spark; pandas is not installed: pip install 'cqopt[spark]' (or 'cqopt[all]')"
>>> missing_extras("build", "numpy") is None  # not an extra's: a broken install, raised
True
"""

from __future__ import annotations

# Packages of the optional extras -> every extra that installs them, the lightest first
# (named for a command whose own extras, in the table below, install none of them).
PACKAGES = {"pyspark": ("spark",), "py4j": ("spark",), "tqdm": ("spark",),
            "pandas": ("generate", "spark", "report"), "matplotlib": ("report",),
            "jinja2": ("report",), "scipy": ("generate",)}

# Every extra a command may need, in setup.cfg's order. build needs Spark only for
# charts too large to build in process (or --engine spark); explain needs none but pandas
# for --analyze, which any extra installs.
COMMANDS = {"build": ("spark",), "show": ("report",), "generate": ("generate",),
            "fidelity": ("spark", "report"), "run": ("spark",), "calibrate": ("spark",)}


def missing_extras(command: str | None, module: str | None) -> str | None:
    """The one line a command says when ``module`` is not installed, or None when
    ``module`` belongs to no extra (then the error is not the user's to fix by pip)."""
    package = (module or "").partition(".")[0]
    if package not in PACKAGES:
        return None
    extras = COMMANDS.get(command or "", ())
    if not set(PACKAGES[package]) & set(extras):  # needed where the table does not say
        extras = (*extras, PACKAGES[package][0])
    said = " and ".join(extras) if len(extras) < 3 else ", ".join(extras)
    return (f"cqopt {command} needs the extra{'s' if len(extras) > 1 else ''} {said}; "
            f"{package} is not installed: pip install 'cqopt[{','.join(extras)}]' "
            "(or 'cqopt[all]')")
