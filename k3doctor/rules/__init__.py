"""Rule tables the checks judge by, as rows: each row says what it fires on, its severity, the
reference section and the remediation code it points to (``launch``: the launch's environment,
run options and server arguments; ``kernel_log``: kernel-health's signatures, the site's own
rules and silences). Rules that are arithmetic on a recipe live beside it (``k3doctor.recipes.rules``).
"""
