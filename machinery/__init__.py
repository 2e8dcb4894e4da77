"""How scripts stop, run as several processes, write files and runs, use the device."""
