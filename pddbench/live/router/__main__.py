from pddbench.live.router.app import main

main()
