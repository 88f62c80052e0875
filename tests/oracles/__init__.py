"""Independent references the tests compare the package with: exact output laws of small
mechanism instances, written from the papers and the notes, never through the package."""
