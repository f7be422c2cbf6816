from ckheur.cli import main

main()
