"""The `hearth` command's exit codes (README, Headless): 0 completed, 2 usage or configuration error, 3 model or
provider error, 4 the task waits for an answer, 5 another Hearth process owns the data folder, 6 the disk is full,
7 the database is damaged, 8 the data folder is read-only or the database cannot be reached, 130 stopped."""

EXIT_OK, EXIT_USAGE, EXIT_PROVIDER, EXIT_WAITING, EXIT_BUSY, EXIT_STOPPED = 0, 2, 3, 4, 5, 130
EXIT_DISK_FULL, EXIT_CORRUPT, EXIT_STORAGE = 6, 7, 8
