"""Checking what comes in: the one error type, its kinds callers tell apart by type, and exit statuses (`errors`), the checks every parser of user data
shares (`parse`: whole numbers, path text, small files), duration flags (`seconds`), how tpuctl writes files
without following a link it did not mean to or widening permissions (`private_files`), how text from outside is
printed on a terminal (`terminal`) with its credentials hidden (`redact`), and the requirements file a launch sends its
hosts, read as pip reads one (`requirements`, its lines' PEP 508 grammar in `pep508`).
"""
