import { isPlain, Widget } from './barrel'

isPlain(new Widget())
