from pddbench.cli import main

main()
