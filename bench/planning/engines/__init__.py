"""Engine argument lists: what each training engine is told on its command line."""
