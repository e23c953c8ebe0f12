"""ringscope's tests, a package so that their helpers import as tests.support.NAME."""
