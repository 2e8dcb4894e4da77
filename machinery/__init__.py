"""How the scripts stop, run as several processes, write files and runs, and use the device."""
