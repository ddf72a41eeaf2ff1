from ckptsel.cli import main

main()
