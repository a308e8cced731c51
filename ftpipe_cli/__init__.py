"""The ``ftpipe`` command line: submit jobs, see their status, run the demo."""
